"""Base-wide item reads: listings, search visibility, reserved paths and the scope rows search
filters resolve against.

Reads only, over the caller's connection; the status rules live in :mod:`knowbase.catalog.items`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles

from knowbase.catalog.item_tree import chunks as _chunks
from knowbase.catalog.models import Item
from knowbase.catalog.schema import (
    ACTIVE_STATUSES,
    CONTAINER_TYPES,
    SEARCHABLE_STATUSES,
    is_container,
)
from knowbase.catalog.schema import knowledge_item as it


def find_searchable(conn: Connection, base_id: str, item_ids: Iterable[str]) -> dict[str, Item]:
    """The searchable items (:data:`SEARCHABLE_STATUSES`) of ``base_id`` among ``item_ids``
    (search visibility, §7)."""
    ids = list(dict.fromkeys(item_ids))
    out: dict[str, Item] = {}
    for part in _chunks(ids):
        for row in conn.execute(sa.select(it).where(it.c.id.in_(part))):
            if row.base_id == base_id and row.status in SEARCHABLE_STATUSES:
                out[row.id] = Item.from_row(row)
    return out


# Built once (an expanding IN): it runs on every search; building it cost more than running it.
_VERSIONS = sa.select(it.c.id, it.c.updated_at, it.c.base_id, it.c.status).where(
    it.c.id.in_(sa.bindparam("ids", expanding=True))
)


def searchable_versions(conn: Connection, base_id: str, item_ids: Iterable[str]) -> dict[str, int]:
    """``{id: updated_at}`` of the searchable items (:data:`SEARCHABLE_STATUSES`) of
    ``base_id`` among ``item_ids``.

    Cheap (no ``data`` column, which holds a note's whole text): search visibility checks this
    on every query and loads full rows only for items it has not seen at this version.
    Filters by base and status here, not in SQL: with them in the WHERE, SQLite plans the
    ``(base_id, id)`` index and the lookup costs ~12x the primary-key one (measured).
    """
    ids = list(dict.fromkeys(item_ids))
    out: dict[str, int] = {}
    for part in _chunks(ids):
        out.update(
            {
                r.id: r.updated_at
                for r in conn.execute(_VERSIONS, {"ids": part})
                if r.base_id == base_id and r.status in SEARCHABLE_STATUSES
            }
        )
    return out


def list_items(
    conn: Connection,
    base_id: str,
    *,
    statuses: Iterable[str] | None = None,
    include_deleting: bool = False,
    roots_only: bool = False,
    origins: Iterable[str] | None = None,
) -> list[Item]:
    """The base's items, oldest first; ``origins`` keeps those re-acquired from these paths."""
    q = sa.select(it).where(it.c.base_id == base_id)
    if origins is not None:
        q = q.where(it.c.origin.in_(sorted(set(origins))))
    if statuses is not None:
        q = q.where(it.c.status.in_(list(statuses)))
    elif not include_deleting:
        q = q.where(it.c.status != "deleting")
    if roots_only:
        q = q.where(it.c.group_id.is_(None))
    return [Item.from_row(r) for r in conn.execute(q.order_by(it.c.created_at, it.c.id))]


def reserved_relative_paths(
    conn: Connection,
    base_id: str,
    *,
    processes: bool,
    exclude_item_id: str | None = None,
    processable: frozenset[str] = frozenset(),
) -> set[str]:
    """Paths taken by every row, plus prospective ``<stem>.md`` of unprocessed files.

    ``deleting`` rows count too (the origin skipped them): their files stay on disk until the
    purge job runs, so reusing the name would fail the copy — or, for a folder prefix, mix new
    files into a directory that the purge is about to remove.
    """
    reserved: set[str] = set()
    for item in list_items(conn, base_id, include_deleting=True):
        if item.id == exclude_item_id:
            continue
        rel = item.data.get("relative_path")
        if rel:
            reserved.add(rel)
        indexed = item.data.get("indexed_relative_path")
        if indexed:
            reserved.add(indexed)
        elif (
            processes
            and item.type == "file"
            and rel
            and posixpath.splitext(rel)[1].lower() in processable
        ):
            reserved.add(posixpath.splitext(rel)[0] + ".md")
    return reserved


def active_items(conn: Connection) -> list[Item]:
    rows = conn.execute(sa.select(it).where(it.c.status.in_(ACTIVE_STATUSES)))
    return [Item.from_row(r) for r in rows]


def count_by_status(conn: Connection, base_id: str) -> dict[str, int]:
    """Every row of the base by status, folders included (a copy compares these)."""
    q = sa.select(it.c.status, sa.func.count()).where(it.c.base_id == base_id).group_by(it.c.status)
    return {r[0]: r[1] for r in conn.execute(q)}


def count_files_by_status(conn: Connection, base_id: str) -> dict[str, int]:
    """The base's files (and pages, notes) by status: what a person counts (issue 42).

    A folder or sitemap counts only when it failed for a reason of its own (no indexable
    files, a refused URL) or is still being read (no files yet): one whose files failed is
    not one more failure.
    """
    own_failure = sa.and_(
        it.c.status == "failed", sa.func.coalesce(it.c.error_code, "") != "child_failed"
    )
    # A folder still being read holds no files yet: it stands for them meanwhile, so a base
    # whose import just started is "processing", not "empty".
    child = it.alias("child")
    unread = sa.and_(
        it.c.status.in_(ACTIVE_STATUSES),
        ~sa.exists().where(child.c.group_id == it.c.id),
    )
    q = (
        sa.select(it.c.status, sa.func.count())
        .where(it.c.base_id == base_id)
        .where(sa.or_(it.c.type.not_in(CONTAINER_TYPES), own_failure, unread))
        .group_by(it.c.status)
    )
    return {r[0]: r[1] for r in conn.execute(q)}


class _JsonText(sa.sql.expression.FunctionElement[str]):
    """``data``'s top-level string field ``key`` as text, in either dialect (``data`` is TEXT)."""

    type = sa.String()
    inherit_cache = True
    name = "kb_json_text"


@compiles(_JsonText, "sqlite")
def _json_text_sqlite(element: _JsonText, compiler: Any, **kw: Any) -> str:
    col, key = list(element.clauses)
    return f"json_extract({compiler.process(col, **kw)}, {compiler.process(key, **kw)})"


@compiles(_JsonText, "postgresql")
def _json_text_pg(element: _JsonText, compiler: Any, **kw: Any) -> str:
    col, key = list(element.clauses)
    return f"(CAST({compiler.process(col, **kw)} AS json) ->> {compiler.process(key, **kw)})"


def _json_key(key: str, dialect_sqlite: bool) -> str:
    return f"$.{key}" if dialect_sqlite else key


def scope_rows(
    conn: Connection, base_id: str, *, since_ms: int | None = None
) -> list[tuple[str, str, str | None, str | None, int]]:
    """``(id, type, relative_path, indexed_relative_path, updated_at)`` of the base's
    searchable leaf items (updated at or after ``since_ms``): what search filters resolve
    against. The two paths are read from ``data`` in SQL, so a note's text is never loaded.
    """
    sqlite = conn.dialect.name == "sqlite"
    q = sa.select(
        it.c.id,
        it.c.type,
        _JsonText(it.c.data, sa.literal(_json_key("relative_path", sqlite))),
        _JsonText(it.c.data, sa.literal(_json_key("indexed_relative_path", sqlite))),
        it.c.updated_at,
    ).where(it.c.base_id == base_id, it.c.status.in_(SEARCHABLE_STATUSES))
    if since_ms is not None:
        q = q.where(it.c.updated_at >= since_ms)
    return [(r[0], r[1], r[2], r[3], r[4]) for r in conn.execute(q) if not is_container(r[1])]
