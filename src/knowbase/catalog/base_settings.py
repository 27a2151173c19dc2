"""The one declaration of a base's settings: every surface derives its view from :data:`SETTINGS`.

A base setting is a column of ``knowledge_base`` that a person chooses (chunking, search,
sync, fetching). Each :class:`BaseSetting` says its name, type, default, bounds or allowed
values, help text, its CLI flag and whether it may change after creation, and the migration
that added its column. From these entries come:

- the catalog: the table's columns and CHECKs (:mod:`.schema`), the checks every write runs
  (:func:`validate`, from :mod:`.bases`), what ``update`` accepts and a new base's defaults;
- the HTTP models ``BaseOut``/``BaseSettingsPatch``/``BaseCreate`` (``interfaces/http_models``);
- the options of ``kb base create`` and ``kb base set`` (``interfaces/cli_base_settings``);
- the console's settings form (``interfaces/console/settings_form.py``: the template loops
  over its fields; ``base_settings.js`` reads and writes whatever the form holds);
- the settings an archive carries (``ingestion/archive_format.SETTINGS``) and a restore copies.

How to add a base setting
-------------------------
1. Append a :class:`BaseSetting` here (``since`` = the revision of step 2).
2. Write a migration under ``migrations/versions/`` that adds the column — check first whether
   it exists, as 0003y and 0004e do: a fresh catalog is built from :mod:`.schema` by 0001, which
   already holds every declared column.
3. Read it where it acts (``base.<name>``; ``Base`` rows carry every column by name).

``tests/catalog/test_base_settings.py`` fails until the column, the ``Base`` field and every
surface have it. The name, the identity of a base (``embedding_model_id``, ``dimensions``,
changed only by a model switch) and its ``index_backend`` (fixed at creation, chosen per home)
are not settings here: each surface states them itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from knowbase.errors import InvalidInput


@dataclass(frozen=True)
class BaseSetting:
    """One setting of a base. Bounds (``minimum``/``maximum``/``choices``) hold everywhere;
    ``input_*`` caps only bound what an HTTP body may carry (so a fuzzer's 10**30 is a 422)."""

    name: str
    type: type  # int, float, str or bool
    default: Any  # what a new base gets when the caller gives nothing; None: unset (NULL)
    help: str  # one line: --help, OpenAPI description, the console field's title
    label: str  # the console form's label
    since: str  # the migration revision that added the column
    nullable: bool = False
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None  # allowed values (plus null when nullable)
    message: str | None = None  # the InvalidInput message (else derived from bounds/choices)
    input_max: float | None = None  # largest number an HTTP body may carry
    input_min_length: int | None = None
    input_max_length: int | None = None
    input_pattern: str | None = None
    value_pattern: str | None = None  # a regex a text value must match whole (with ``sql_check``)
    sql_check: str | None = None  # the CHECK expression when bounds/choices cannot state it
    suggestions: tuple[str, ...] = ()  # values the console offers for a free-text setting
    column_length: int = 255  # VARCHAR length of a text column
    check: str | None = None  # name of the column's CHECK constraint (only those that have one)
    mutable: bool = True  # may change after creation (kb base set, PATCH /bases/{base})
    portable: bool = True  # an archive carries it; a restore copies it to the new base
    flag: str | None = None  # the CLI flag (default --name-with-dashes)
    cli_null: str | int | None = None  # the CLI value that clears it: a word, or -1: negatives
    null_label: str = "none"  # what null means, in words (console placeholder, CLI help)
    advanced: bool = False  # the console shows it under "Advanced", after the basic ones
    needs_model: bool = False  # applies only to a base with an embedding model (fusion)

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def error(self) -> str:
        """The message every refusal of a value names."""
        if self.message:
            return self.message
        if self.choices:
            quoted = [repr(c) for c in self.choices] + (["empty"] if self.nullable else [])
            return f"{self.name} must be {', '.join(quoted[:-1])} or {quoted[-1]}"
        if self.minimum is not None and self.maximum is not None:
            return f"{self.name} must be between {self.minimum:g} and {self.maximum:g}"
        return f"{self.name} must be {_TYPE_WORDS[self.type]}"

    def check_sql(self) -> str | None:
        """The column's CHECK expression, from its bounds or allowed values."""
        col = self.name
        if self.sql_check:
            expr = self.sql_check
        elif self.choices:
            expr = f"{col} IN ({', '.join(repr(c) for c in self.choices)})"
        else:
            parts = []
            if self.minimum is not None:
                parts.append(f"{col} >= {self.minimum:g}")
            if self.maximum is not None:
                parts.append(f"{col} <= {self.maximum:g}")
            if not parts:
                return None
            expr = " AND ".join(parts)
            if self.nullable and len(parts) > 1:
                expr = f"({expr})"
        return f"{col} IS NULL OR {expr}" if self.nullable else expr

    def refusal(self, value: Any) -> str | None:
        """Why ``value`` is not allowed (the message), or None when it is."""
        if value is None:
            return None if self.nullable else self.error
        if not _is_type(value, self.type):
            return self.error
        if self.choices is not None and value not in self.choices:
            return self.error
        if self.value_pattern is not None and not re.fullmatch(self.value_pattern, value):
            return self.error
        if self.minimum is not None and value < self.minimum:
            return self.error
        if self.maximum is not None and value > self.maximum:
            return self.error
        return None


_TYPE_WORDS = {int: "an integer", float: "a number", str: "text", bool: "true or false"}


def _is_type(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind is float:
        return isinstance(value, int | float)
    return isinstance(value, kind)


_MODEL_ID = r"^[^:]+:[\s\S]"  # ``profile:model``, both parts non-empty (registry.parse_model_id)
#: OCR, or captions from a vision model ``caption:<profile>:<model>`` (profile in config.toml).
_PROCESSOR = r"tesseract|caption:[^:\s]+:\S[^\r\n]*"

#: Every base setting, in the order surfaces list them.
SETTINGS: tuple[BaseSetting, ...] = (
    BaseSetting(
        "rerank_model_id",
        str,
        None,
        "Rerank model id (profile:model)",
        "Rerank model",
        "0001",
        nullable=True,
        input_min_length=3,
        input_max_length=200,
        input_pattern=_MODEL_ID,
        flag="--rerank",
        cli_null="none",
        advanced=True,
    ),
    BaseSetting(
        "file_processor_id",
        str,
        None,
        "File processor: 'tesseract' (OCR of scans and images) or "
        "'caption:<profile>:<model>' (image and figure captions)",
        "File processor",
        "0001",
        nullable=True,
        value_pattern=_PROCESSOR,
        input_max_length=255,
        sql_check=(
            "file_processor_id = 'tesseract'"
            # "\\:" keeps SQLAlchemy from reading ":_" as a bind parameter (migration 0006c)
            " OR file_processor_id LIKE 'caption\\:_%\\:_%'"
        ),
        suggestions=("tesseract", "caption:"),
        message="file_processor_id must be 'tesseract', 'caption:<profile>:<model>' or empty",
        check="knowledge_base_processor_check",
        flag="--processor",
        cli_null="none",
    ),
    BaseSetting(
        "chunk_size",
        int,
        1024,
        "Tokens per chunk",
        "Chunk size (tokens)",
        "0001",
        minimum=1,
        input_max=100_000,
        check="knowledge_base_chunk_size_check",
        message="chunk_size must be a positive number of tokens",
    ),
    BaseSetting(
        "chunk_overlap",
        int,
        200,
        "Tokens a chunk shares with the one before",
        "Chunk overlap",
        "0001",
        minimum=0,
        input_max=100_000,
        message="chunk_overlap must be 0 or more",
    ),  # its CHECK is the pair rule below (knowledge_base_overlap_check)
    BaseSetting(
        "chunk_strategy",
        str,
        "structured",
        "How text is cut: by structure or at a separator",
        "Chunking",
        "0001",
        choices=("structured", "delimiter"),
        column_length=16,
        check="knowledge_base_strategy_check",
        advanced=True,
    ),
    BaseSetting(
        "chunk_separator",
        str,
        "\\n\\n",
        "Separator of the delimiter strategy",
        "Chunk separator",
        "0001",
        input_max_length=100,
        column_length=64,
        advanced=True,
    ),
    BaseSetting(
        "threshold",
        float,
        None,
        "Lowest score a search returns, 0..1",
        "Score threshold",
        "0001",
        nullable=True,
        minimum=0,
        maximum=1,
        check="knowledge_base_threshold_check",
    ),
    BaseSetting(
        "document_count",
        int,
        None,
        "Search top-K",
        "Results per search",
        "0001",
        nullable=True,
        minimum=1,
        input_max=1000,
        check="knowledge_base_doc_count_check",
        message="document_count must be positive",
    ),
    BaseSetting(
        "allow_local_urls",
        bool,
        False,
        "Let this base fetch pages on loopback or private addresses",
        "Fetch local and private addresses (URLs on this machine or network)",
        "0001",
    ),
    BaseSetting(
        "sync_deletes",
        bool,
        False,
        "kb sync deletes items whose files vanished (without --prune)",
        "Sync deletes items whose files vanished",
        "0003y",
        advanced=True,
    ),
    BaseSetting(
        "url_max_age",
        int,
        None,
        "Seconds after which kb sync re-fetches a page",
        "Re-fetch pages older than (seconds)",
        "0003y",
        nullable=True,
        minimum=0,
        input_max=10**9,
        message="url_max_age must be 0 or more seconds",
        cli_null=-1,
        null_label="never",
        advanced=True,
    ),
    BaseSetting(
        "fusion",
        str,
        "convex",
        "How hybrid search fuses its lanes",
        "Fusion",
        "0004e",
        choices=("rrf", "convex"),
        column_length=16,
        advanced=True,
        needs_model=True,
    ),
    BaseSetting(
        "fusion_alpha",
        float,
        0.4,
        "Vector lane weight, 0..1",
        "Vector lane weight",
        "0004e",
        minimum=0,
        maximum=1,
        advanced=True,
        needs_model=True,
    ),
    BaseSetting(
        "rrf_k",
        int,
        60,
        "RRF constant k (rrf fusion)",
        "RRF k",
        "0004e",
        minimum=1,
        input_max=100_000,
        message="rrf_k must be a positive integer",
        advanced=True,
        needs_model=True,
    ),
)

BY_NAME: Mapping[str, BaseSetting] = {s.name: s for s in SETTINGS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
MUTABLE: frozenset[str] = frozenset(s.name for s in SETTINGS if s.mutable)
PORTABLE: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.portable)


def default(name: str) -> Any:
    return BY_NAME[name].default


def defaults() -> dict[str, Any]:
    """What a new base gets for each setting the caller left out (unset ones stay NULL)."""
    return {s.name: s.default for s in SETTINGS if s.default is not None}


def validate(values: Mapping[str, Any]) -> None:
    """Each given setting against its entry, then the rules between settings; InvalidInput
    names the first refusal. Keys that are not settings are left to the caller."""
    for setting in SETTINGS:
        if setting.name in values:
            why = setting.refusal(values[setting.name])
            if why is not None:
                raise InvalidInput(why, field=setting.name, value=_shown(values[setting.name]))
    size, overlap = values.get("chunk_size"), values.get("chunk_overlap")
    if size is not None and overlap is not None and overlap >= size:
        # said with both numbers and the way out: "chunk size 5" alone read as a bug (issue 42)
        raise InvalidInput(
            f"chunk_overlap ({overlap} tokens) must be smaller than chunk_size ({size} tokens):"
            f" lower the overlap as well, e.g. to {size // 5}",
            field="chunk_overlap",
        )
    if values.get("chunk_strategy") == "delimiter" and not values.get("chunk_separator"):
        raise InvalidInput("a separator is required with the delimiter strategy")


def _shown(value: Any) -> Any:
    return value if isinstance(value, int | float | bool | None) else str(value)[:100]


def pair_checks() -> list[tuple[str, str]]:
    """``(name, SQL)`` of the CHECKs that tie settings together (the table holds them too)."""
    return [
        ("knowledge_base_overlap_check", "chunk_overlap >= 0 AND chunk_overlap < chunk_size"),
    ]
