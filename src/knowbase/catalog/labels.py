"""Tags and metadata on items: their shape, their limits, and how a folder passes them down.

An item keeps its labels in its ``data`` under ``tags`` (a sorted list of distinct strings) and
``metadata`` (a small JSON object of scalars or lists of scalars). ``data`` is merged, never
replaced, by reindex, sync, model switch and retries, and travels whole through export/import
and copy-home, so labels survive all of them.

A document's *effective* labels are its own plus those of every folder (or sitemap) above it:
tags are the union, metadata keys of the nearer item win. They are computed when a search
resolves its scope, so a file a sync adds later, or a tag set on a folder afterwards, applies
at once.

>>> normalize_tags([" Finance ", "2024", "finance", ""])
['2024', 'Finance']
>>> tags, meta = effective_labels("c", {"c": ("b", ["x"], {"k": 1}), "b": (None, ["y"], {"j": 2})})
>>> sorted(tags), meta
(['x', 'y'], {'k': 1, 'j': 2})
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles

from knowbase.catalog.schema import knowledge_item as it
from knowbase.errors import InvalidInput

TAGS_KEY = "tags"
METADATA_KEY = "metadata"
MAX_TAGS = 64
MAX_TAG_CHARS = 100
MAX_METADATA_KEYS = 64
MAX_METADATA_KEY_CHARS = 100
MAX_METADATA_JSON_BYTES = 8192

Scalar = str | int | float | bool


def normalize_tags(tags: Iterable[str] | str | None) -> list[str]:
    """Trimmed, distinct (case-insensitively; the first spelling wins) and sorted tags.

    A comma-separated string is split. Raises ``InvalidInput`` for a tag with control
    characters, one longer than 100 characters, or more than 64 tags.
    """
    if tags is None:
        return []
    values = tags.split(",") if isinstance(tags, str) else list(tags)
    seen: dict[str, str] = {}
    for raw in values:
        if not isinstance(raw, str):
            raise InvalidInput(f"a tag must be text, not {type(raw).__name__}", tag=repr(raw))
        tag = raw.strip()
        if not tag:
            continue
        if len(tag) > MAX_TAG_CHARS:
            raise InvalidInput(f"a tag is limited to {MAX_TAG_CHARS} characters", tag=tag[:40])
        if any(unicodedata.category(ch) == "Cc" for ch in tag):
            raise InvalidInput("a tag cannot hold control characters", tag=repr(tag))
        seen.setdefault(tag.casefold(), tag)
    if len(seen) > MAX_TAGS:
        raise InvalidInput(f"an item holds at most {MAX_TAGS} tags", count=len(seen))
    return sorted(seen.values(), key=lambda t: (t.casefold(), t))


def _check_value(key: str, value: Any) -> Scalar | list[Scalar]:
    if isinstance(value, list):
        for v in value:
            if not isinstance(v, (str, int, float, bool)):
                raise InvalidInput(f"metadata {key!r}: a list may hold only text and numbers")
        return value
    if isinstance(value, (str, int, float, bool)):
        return value
    raise InvalidInput(
        f"metadata {key!r}: values are text, numbers, booleans or lists of them",
        key=key,
        type=type(value).__name__,
    )


def normalize_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """A checked copy of ``metadata``: string keys, scalar or list values, at most 64 keys and
    8 KiB of JSON. ``None`` values drop their key (so an update can remove one)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidInput("metadata must be an object of key → value")
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not key.strip() or len(key) > MAX_METADATA_KEY_CHARS:
            raise InvalidInput(
                f"a metadata key is non-empty text of at most {MAX_METADATA_KEY_CHARS} characters",
                key=repr(key)[:60],
            )
        if value is None:
            continue
        out[key.strip()] = _check_value(key, value)
    if len(out) > MAX_METADATA_KEYS:
        raise InvalidInput(f"an item holds at most {MAX_METADATA_KEYS} metadata keys")
    if len(json.dumps(out, ensure_ascii=False).encode()) > MAX_METADATA_JSON_BYTES:
        raise InvalidInput(f"metadata is limited to {MAX_METADATA_JSON_BYTES:,} bytes of JSON")
    return out


def labels_of(data: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """An item's own ``(tags, metadata)`` from its data."""
    return list(data.get(TAGS_KEY) or []), dict(data.get(METADATA_KEY) or {})


def label_fields(tags: Iterable[str] | None, metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``data`` keys to store for these labels (empty ones are left out)."""
    fields: dict[str, Any] = {}
    if tags:
        fields[TAGS_KEY] = normalize_tags(tags)
    if metadata:
        fields[METADATA_KEY] = normalize_metadata(metadata)
    return fields


LabelRow = tuple[str | None, list[str], dict[str, Any]]
"""``(parent id, own tags, own metadata)`` of one item, by item id."""


def effective_labels(
    item_id: str, rows: Mapping[str, LabelRow]
) -> tuple[frozenset[str], dict[str, Any]]:
    """The item's tags (its own and every ancestor's) and metadata (nearest item wins)."""
    tags: set[str] = set()
    metadata: dict[str, Any] = {}
    seen: set[str] = set()
    current: str | None = item_id
    while current is not None and current in rows and current not in seen:
        seen.add(current)
        parent, own_tags, own_meta = rows[current]
        tags.update(own_tags)
        for key, value in own_meta.items():
            metadata.setdefault(key, value)
        current = parent
    return frozenset(tags), metadata


def parse_json_field(text: str | None, default: Any) -> Any:
    """A JSON value read out of ``data`` in SQL (None or malformed: ``default``)."""
    if not text:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


class _JsonMember(sa.sql.expression.FunctionElement[str]):
    """``data``'s top-level member ``key`` as JSON text, in either dialect (``data`` is TEXT)."""

    type = sa.String()
    inherit_cache = True
    name = "kb_json_member"


@compiles(_JsonMember, "sqlite")
def _json_member_sqlite(element: _JsonMember, compiler: Any, **kw: Any) -> str:
    col, key = list(element.clauses)
    # json_extract gives arrays and objects back as JSON text
    return f"json_extract({compiler.process(col, **kw)}, {compiler.process(key, **kw)})"


@compiles(_JsonMember, "postgresql")
def _json_member_pg(element: _JsonMember, compiler: Any, **kw: Any) -> str:
    col, key = (compiler.process(c, **kw) for c in element.clauses)
    return f"CAST(CAST({col} AS json) -> {key} AS text)"


def label_rows(conn: Connection, base_id: str) -> dict[str, LabelRow]:
    """Every item of the base as ``id → (parent id, own tags, own metadata)``: what tag and
    metadata filters resolve against. Read from ``data`` in SQL: a note's text is not loaded."""
    sqlite = conn.dialect.name == "sqlite"

    def member(key: str) -> _JsonMember:
        return _JsonMember(it.c.data, sa.literal(f"$.{key}" if sqlite else key))

    q = sa.select(it.c.id, it.c.group_id, member(TAGS_KEY), member(METADATA_KEY)).where(
        it.c.base_id == base_id
    )
    return {
        r[0]: (r[1], parse_json_field(r[2], []), parse_json_field(r[3], {}))
        for r in conn.execute(q)
    }


def base_effective_labels(
    conn: Connection, base_id: str, item_ids: Iterable[str]
) -> dict[str, tuple[list[str], dict[str, Any]]]:
    """Each item's tags (sorted) and metadata, including its folders', read in one query."""
    rows = label_rows(conn, base_id)
    out = {}
    for item_id in item_ids:
        tags, metadata = effective_labels(item_id, rows)
        out[item_id] = (sorted(tags), metadata)
    return out
