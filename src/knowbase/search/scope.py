"""Search filters — ``under``, ``types``, ``since`` — resolved to the materials a search may return.

The filters are resolved against the catalog's completed leaf items before the lanes run, into
a set of material ids (= item ids); both lanes rank only among them (``within`` on
``IndexStore.keyword_lane``/``vector_lane``), so a filter never leaves fewer than ``top_k``
results while more matches exist — it is not a post-filter. A filter that matches nothing gives
an empty result; a malformed one raises :class:`~knowbase.errors.InvalidFilter`.

- ``under``: a Concept ID prefix matched on whole path segments: ``papers`` matches
  ``papers/x.md`` and ``papers/2024/y.pdf`` (and a document whose Concept ID is ``papers``), not
  ``papers2/x.md``. Leading and trailing slashes are ignored; both sides are compared in NFC.
- ``types``: the source's type — a file's extension in lower case without the dot (``pdf``,
  ``md``, ``docx``; a PDF processed into Markdown is still ``pdf``), ``url`` for a web page
  (also a sitemap's pages), ``note`` for a note. Several types: any of them. Each value may be
  a comma list; a leading dot and upper case are accepted (``.PDF``).
- ``since``: an ISO 8601 date or datetime; the items updated (indexed) at or after it. A date
  is midnight UTC; a datetime without an offset is UTC.
- ``tags``/``where`` (:mod:`.label_filters`) and ``conditions`` (Dify's ``metadata_condition``,
  :mod:`.conditions`): on each document's effective tags and metadata, resolved here too.

>>> f = parse_filters(under="/papers/", types=["PDF,md"])
>>> (f.under, sorted(f.types))
('papers', ['md', 'pdf'])
>>> allowed_materials([("a", "file", "papers/x.pdf", None, 0),
...                    ("b", "file", "papers2/y.pdf", None, 0)], f)
frozenset({'a'})
"""

from __future__ import annotations

import posixpath
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from knowbase.errors import InvalidFilter
from knowbase.search.conditions import ConditionSet, check_names, fields_of, parse_conditions
from knowbase.search.label_filters import Condition, matches_labels, parse_tags, parse_where

ScopeRow = tuple[str, str, str | None, str | None, int]
"""``(item id, item type, relative_path, indexed_relative_path, updated_at ms)``."""

NON_FILE_TYPES = frozenset({"url", "note"})
MAX_UNDER_CHARS = 4096
MAX_TYPES = 32


@dataclass(frozen=True)
class SearchFilters:
    """Parsed, valid filters (:func:`parse_filters`). Empty fields restrict nothing."""

    under: str | None = None
    types: frozenset[str] = frozenset()
    since_ms: int | None = None
    tags: frozenset[str] = frozenset()  # case-folded; all required (label_filters.py)
    where: tuple[Condition, ...] = ()
    conditions: ConditionSet | None = None  # Dify's metadata_condition (conditions.py)

    @property
    def active(self) -> bool:
        return (
            self.under is not None
            or bool(self.types)
            or self.since_ms is not None
            or self.on_labels
        )

    @property
    def on_labels(self) -> bool:
        """Whether tags or metadata conditions restrict the search."""
        return bool(self.tags) or bool(self.where) or self.conditions is not None

    def explain(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.under is not None:
            out["under"] = self.under
        if self.types:
            out["types"] = sorted(self.types)
        if self.since_ms is not None:
            out["since"] = datetime.fromtimestamp(self.since_ms / 1000, UTC).isoformat()
        if self.tags:
            out["tags"] = sorted(self.tags)
        if self.where:
            out["where"] = [c.explain() for c in self.where]
        if self.conditions is not None:
            out["conditions"] = self.conditions.explain()
        return out


@dataclass(frozen=True)
class Scope:
    """Filters and the material ids they allow in one base."""

    filters: SearchFilters
    within: frozenset[str]
    # ``where`` keys no item of the base has (a typo?), and the keys its items do have
    unknown_keys: tuple[str, ...] = ()
    known_keys: tuple[str, ...] = ()

    def explain(self) -> dict[str, Any]:
        """What ``explain["filters"]`` shows: each filter applied and how many it allowed;
        ``unknown_keys`` (with ``known_keys``) when a ``where`` key is on no item."""
        out = {**self.filters.explain(), "allowed_materials": len(self.within)}
        if self.unknown_keys:
            out.update(unknown_keys=list(self.unknown_keys), known_keys=list(self.known_keys))
        return out


def parse_filters(
    *,
    under: str | None = None,
    types: Iterable[str] | str | None = None,
    since: str | date | datetime | None = None,
    tags: Iterable[str] | str | None = None,
    where: Any = None,
    conditions: Any = None,
) -> SearchFilters:
    """Validate and normalise raw filter values (CLI options, JSON fields, Python arguments).

    ``tags`` and ``where`` are read by :mod:`knowbase.search.label_filters`, ``conditions``
    (Dify's ``metadata_condition``) by :mod:`knowbase.search.conditions`."""
    return SearchFilters(
        parse_under(under),
        parse_types(types),
        parse_since(since),
        parse_tags(tags),
        parse_where(where),
        parse_conditions(conditions),
    )


def parse_under(value: str | None) -> str | None:
    """``under`` without surrounding slashes, NFC; None for no filter ("" or "/" too)."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_UNDER_CHARS:
        raise InvalidFilter(
            f"under must be a path of at most {MAX_UNDER_CHARS} characters", field="under"
        )
    path = unicodedata.normalize("NFC", value.strip()).strip("/")
    if not path:
        return None
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\\" in path or "\x00" in path:
        raise InvalidFilter(
            "under must be a relative path inside the base (no '.', '..', '//' or '\\')",
            field="under",
            value=value,
        )
    return path


def known_types() -> frozenset[str]:
    """Every type a filter may name: the readers' extensions, ``url`` and ``note``."""
    from knowbase.pipeline.readers import SUPPORTED_EXTENSIONS

    return frozenset(e.lstrip(".") for e in SUPPORTED_EXTENSIONS) | NON_FILE_TYPES


def parse_types(values: Iterable[str] | str | None) -> frozenset[str]:
    """Lower-case type names from values that may be comma lists; unknown names raise."""
    if values is None:
        return frozenset()
    if isinstance(values, str):
        values = [values]
    names: set[str] = set()
    for value in values:
        if not isinstance(value, str):
            raise InvalidFilter("types must be strings", field="types")
        names.update(n.strip().lstrip(".").lower() for n in value.split(",") if n.strip())
    if len(names) > MAX_TYPES:
        raise InvalidFilter(f"at most {MAX_TYPES} types", field="types")
    known = known_types()
    unknown = sorted(names - known)
    if unknown:
        raise InvalidFilter(
            f"unknown type {', '.join(map(repr, unknown))}; types are file extensions "
            f"({', '.join(sorted(known - NON_FILE_TYPES))}), url or note",
            field="types",
            value=unknown,
        )
    return frozenset(names)


def parse_since(value: str | date | datetime | None) -> int | None:
    """Epoch milliseconds of an ISO 8601 date (midnight UTC) or datetime (UTC if naive)."""
    if value is None:
        return None
    when: datetime
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, date):
        when = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        text = value.strip()
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidFilter(
                f"since must be an ISO 8601 date or datetime, e.g. 2024-05-01 or "
                f"2024-05-01T12:00:00Z, not {value!r}",
                field="since",
                value=value,
            ) from None
    else:
        raise InvalidFilter("since must be an ISO 8601 date or datetime", field="since")
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def type_of(item_type: str, relative_path: str | None) -> str:
    """An item's filter type: ``url``/``note``, or the file's extension (``file`` for none)."""
    if item_type != "file":
        return "url" if item_type in ("url", "sitemap") else item_type
    ext = posixpath.splitext(relative_path or "")[1]
    return ext.lstrip(".").lower() or "file"


def under_matches(concept_id: str | None, under: str) -> bool:
    """Whether ``concept_id`` is ``under`` or lies inside it (whole path segments)."""
    if not concept_id:
        return False
    cid = unicodedata.normalize("NFC", concept_id)
    return cid == under or cid.startswith(under + "/")


def allowed_materials(rows: Iterable[ScopeRow], filters: SearchFilters) -> frozenset[str]:
    """The ids among ``rows`` (:data:`ScopeRow`) that every filter lets through."""
    out = set()
    for item_id, item_type, rel, indexed, updated_at in rows:
        if filters.since_ms is not None and updated_at < filters.since_ms:
            continue
        if filters.types and type_of(item_type, rel) not in filters.types:
            continue
        if filters.under is not None and not under_matches(indexed or rel, filters.under):
            continue
        out.add(item_id)
    return frozenset(out)


def resolve(catalog: Any, base_id: str, filters: SearchFilters | None) -> Scope | None:
    """The base's :class:`Scope` under ``filters`` (one catalog read); None without filters."""
    if filters is None or not filters.active:
        return None
    from knowbase.catalog import items as item_repo
    from knowbase.catalog.labels import label_rows

    conditions = filters.conditions
    with catalog.read() as conn:
        rows = item_repo.scope_rows(conn, base_id, since_ms=filters.since_ms)
        labels = label_rows(conn, base_id) if filters.on_labels else None
        allowed = allowed_materials(rows, filters)
        shown: dict[str, dict[str, Any]] = {}
        if conditions is not None and conditions.names() & {"title", "source"}:
            # title and source live in the item's data: loaded only when a condition names them
            found = item_repo.find_searchable(conn, base_id, allowed)
            shown = {i: {"title": it.title, "source": it.source} for i, it in found.items()}
    if labels is None:
        return Scope(filters, allowed)
    known = sorted({k for _, _, meta in labels.values() for k in meta})
    if conditions is not None:
        check_names(conditions, set(known))
    own = {r[0]: {"item_type": r[1], "concept_id": r[3] or r[2]} for r in rows}
    allowed = frozenset(
        i for i in allowed if _labels_pass(i, labels, filters, {**own[i], **shown.get(i, {})})
    )
    # ``where`` keys no item of the base has (a typo?): the surfaces warn with the known keys
    unknown = tuple(dict.fromkeys(c.key for c in filters.where if c.key not in known))
    return Scope(filters, allowed, unknown, tuple(known))


def _labels_pass(item_id: str, rows: Any, filters: SearchFilters, item: dict[str, Any]) -> bool:
    from knowbase.catalog.labels import effective_labels

    tags, metadata = effective_labels(item_id, rows)
    if not matches_labels(tags, metadata, filters.tags, filters.where):
        return False
    return filters.conditions is None or filters.conditions.holds(fields_of(tags, metadata, item))
