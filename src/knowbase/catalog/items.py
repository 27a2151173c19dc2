"""Item repository and the status rules of §1.3 (functions over the caller's connection).

Rules enforced here, for every writer:
- nothing leaves ``deleting`` (a write that tries is ignored);
- writing ``failed`` over a subtree skips ``deleting`` rows;
- after a child's status changes its containers are reconciled (the roll-up).
"""

from __future__ import annotations

import json
import logging
import posixpath
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles

from knowbase.catalog.db import now_ms
from knowbase.catalog.models import Item
from knowbase.catalog.schema import ACTIVE_STATUSES, SEARCHABLE_STATUSES, is_container
from knowbase.catalog.schema import item_tombstone as tombstone_t
from knowbase.catalog.schema import knowledge_item as it
from knowbase.errors import NotFound
from knowbase.ids import new_time_id

log = logging.getLogger(__name__)

CHILD_FAILED = ("child_failed", "One or more child items failed")
_CHUNK = 500


def _chunks(values: Sequence[str], size: int = _CHUNK) -> Iterable[Sequence[str]]:
    for i in range(0, len(values), size):
        yield values[i : i + size]


def _new_row(
    *, base_id: str, type: str, data: dict[str, Any], origin: str | None, group_id: str | None
) -> dict[str, Any]:
    ts = now_ms()
    return {
        "id": new_time_id(),
        "base_id": base_id,
        "group_id": group_id,
        "type": type,
        "data": json.dumps(data, ensure_ascii=False),
        "origin": origin,
        "status": "preparing" if is_container(type) else "processing",
        "error_code": None,
        "error_message": None,
        "created_at": ts,
        "updated_at": ts,
    }


def insert_active(
    conn: Connection,
    *,
    base_id: str,
    type: str,
    data: dict[str, Any],
    origin: str | None = None,
    group_id: str | None = None,
    reconcile: bool = True,
) -> Item:
    """Create a row in its first active state and reconcile its containers in the same tx."""
    row = _new_row(base_id=base_id, type=type, data=data, origin=origin, group_id=group_id)
    conn.execute(it.insert().values(**row))
    if reconcile and group_id:
        reconcile_containers(conn, group_id)
    return Item.from_mapping(row)  # every column is in ``row``: no need to read it back


def insert_active_many(
    conn: Connection,
    *,
    base_id: str,
    type: str,
    rows: Sequence[tuple[str | None, str | None, dict[str, Any]]],
) -> list[Item]:
    """Many rows of one type in their first active state, ``(group_id, origin, data)`` each,
    in one multi-row INSERT (a folder's files); no roll-up: the caller reconciles once."""
    built = [
        _new_row(base_id=base_id, type=type, data=data, origin=origin, group_id=group_id)
        for group_id, origin, data in rows
    ]
    if built:
        conn.execute(it.insert(), built)
    return [Item.from_mapping(r) for r in built]


def get(conn: Connection, item_id: str) -> Item:
    item = find(conn, item_id)
    if item is None:
        raise NotFound(f"no knowledge item {item_id!r}", item_id=item_id)
    return item


# Built once: every index job reads and writes its item a few times, and building a
# statement cost more than running it (the per-document floor of an import).
_FIND = sa.select(it).where(it.c.id == sa.bindparam("item_id"))


def find(conn: Connection, item_id: str) -> Item | None:
    row = conn.execute(_FIND, {"item_id": item_id}).first()
    return Item.from_row(row) if row else None


def find_many(conn: Connection, item_ids: Iterable[str]) -> dict[str, Item]:
    ids = list(dict.fromkeys(item_ids))
    out: dict[str, Item] = {}
    for part in _chunks(ids):
        for row in conn.execute(sa.select(it).where(it.c.id.in_(part))):
            out[row.id] = Item.from_row(row)
    return out


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


def searchable_versions(
    conn: Connection, base_id: str, item_ids: Iterable[str]
) -> dict[str, int]:
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
) -> list[Item]:
    q = sa.select(it).where(it.c.base_id == base_id)
    if statuses is not None:
        q = q.where(it.c.status.in_(list(statuses)))
    elif not include_deleting:
        q = q.where(it.c.status != "deleting")
    if roots_only:
        q = q.where(it.c.group_id.is_(None))
    return [Item.from_row(r) for r in conn.execute(q.order_by(it.c.created_at, it.c.id))]


def children(conn: Connection, item_id: str) -> list[Item]:
    q = sa.select(it).where(it.c.group_id == item_id).order_by(it.c.created_at, it.c.id)
    return [Item.from_row(r) for r in conn.execute(q)]


def subtree_ids(conn: Connection, root_ids: Iterable[str]) -> list[str]:
    """Roots and every descendant (recursive CTE; portable to PostgreSQL)."""
    roots = list(dict.fromkeys(root_ids))
    found: list[str] = []
    for part in _chunks(roots):
        tree = sa.select(it.c.id).where(it.c.id.in_(part)).cte("tree", recursive=True)
        tree = tree.union_all(sa.select(it.c.id).where(it.c.group_id == tree.c.id))
        found.extend(r[0] for r in conn.execute(sa.select(tree.c.id)))
    return list(dict.fromkeys(found))


def subtree(conn: Connection, root_ids: Iterable[str]) -> list[Item]:
    ids = subtree_ids(conn, root_ids)
    found = find_many(conn, ids)
    return [found[i] for i in ids if i in found]


_STATUS_VALUES = {
    "status": sa.bindparam("new_status"),
    "error_code": sa.bindparam("new_code"),
    "error_message": sa.bindparam("new_message"),
    "updated_at": sa.bindparam("now"),
}
_SET_STATUS_ANY = it.update().where(it.c.id == sa.bindparam("item_id")).values(_STATUS_VALUES)
_SET_STATUS = _SET_STATUS_ANY.where(it.c.status != "deleting")


_ADVANCE_ACTIVE = (
    it.update()
    .where(it.c.id == sa.bindparam("item_id"), it.c.status.in_(ACTIVE_STATUSES))
    .values(
        status=sa.bindparam("new_status"),
        error_code=None,
        error_message=None,
        updated_at=sa.bindparam("now"),
    )
)


def advance_active(conn: Connection, item_id: str, status: str) -> bool:
    """Move an active item to another active status in one statement (an index job's
    ``reading`` and ``embedding``): no roll-up, since a container only tells active from
    failed or done. False, writing nothing, when the item is missing or not active (e.g.
    ``deleting``): the caller then falls back to :func:`set_status`."""
    if status not in ACTIVE_STATUSES:
        raise ValueError(f"{status!r} is not an active status")
    args = {"item_id": item_id, "new_status": status, "now": now_ms()}
    return bool(conn.execute(_ADVANCE_ACTIVE, args).rowcount)


def set_status(
    conn: Connection,
    item_id: str,
    status: str,
    *,
    error_code: str | None = None,
    error_message: str | None = None,
    roll_up: bool = True,
) -> bool:
    """Write a status (never out of ``deleting``) and roll it up (unless ``roll_up`` is False:
    the caller reconciles the container itself, once for many children). Returns whether
    written."""
    item = find(conn, item_id)
    if item is None:
        return False
    if item.status == "deleting" and status != "deleting":
        log.warning("refusing to move deleting item %s to %s", item_id, status)
        return False
    if status == "failed":
        error_code = error_code or "item_failed"
        error_message = error_message or error_code
    else:
        error_code = error_message = None
    # The guard is in the UPDATE itself: under PostgreSQL's READ COMMITTED a delete may mark
    # the row ``deleting`` after the read above, and this write must not undo that.
    written = conn.execute(
        _SET_STATUS if status != "deleting" else _SET_STATUS_ANY,
        {
            "item_id": item_id,
            "new_status": status,
            "new_code": error_code,
            "new_message": error_message,
            "now": now_ms(),
        },
    ).rowcount
    if not written:
        log.warning("item %s became deleting meanwhile; not moving it to %s", item_id, status)
        return False
    # A container's status only depends on whether a child is still active, failed or done:
    # moving between two active states (processing → reading → embedding) cannot change it.
    both_active = item.status in ACTIVE_STATUSES and status in ACTIVE_STATUSES
    if roll_up and item.group_id and not both_active:
        reconcile_containers(conn, item.group_id)
    return True


def fail_items(
    conn: Connection,
    item_ids: Iterable[str],
    code: str,
    message: str,
    *,
    only_statuses: Iterable[str] | None = None,
) -> list[str]:
    """Set ``failed`` on the given rows, skipping ``deleting`` ones; reconcile their parents.

    ``only_statuses``: write only rows still in one of these (checked in the UPDATE, so a row
    that moved on since the caller read it — its job just finished — is left alone).
    """
    ids = list(dict.fromkeys(item_ids))
    allowed = tuple(only_statuses) if only_statuses is not None else None
    changed: list[str] = []
    parents: set[str] = set()
    for part in _chunks(ids):
        # one guarded UPDATE … RETURNING: a row marked deleting meanwhile is neither written
        # nor reported (a select-then-update by id would overwrite it on PostgreSQL)
        rows = conn.execute(
            it.update()
            .where(
                it.c.id.in_(part),
                it.c.status != "deleting",
                it.c.status.in_(allowed) if allowed is not None else sa.true(),
            )
            .values(status="failed", error_code=code, error_message=message, updated_at=now_ms())
            .returning(it.c.id, it.c.group_id)
        ).all()
        if not rows:
            continue
        changed.extend(r.id for r in rows)
        parents.update(r.group_id for r in rows if r.group_id)
    for parent in parents - set(changed):
        reconcile_containers(conn, parent)
    return changed


def set_statuses_raw(conn: Connection, item_ids: Iterable[str], status: str) -> None:
    """Set a non-failed status on many rows (no roll-up, skips deleting) — for reindex resets."""
    ids = list(item_ids)
    for part in _chunks(ids):
        conn.execute(
            it.update()
            .where(it.c.id.in_(part), it.c.status != "deleting")
            .values(status=status, error_code=None, error_message=None, updated_at=now_ms())
        )


def mark_deleting(conn: Connection, root_ids: Iterable[str]) -> list[str]:
    """Set every row of the subtrees to ``deleting`` (membership resolved in this tx)."""
    ids = subtree_ids(conn, root_ids)
    for part in _chunks(ids):
        conn.execute(
            it.update()
            .where(it.c.id.in_(part))
            .values(status="deleting", error_code=None, error_message=None, updated_at=now_ms())
        )
    return ids


def update_data(conn: Connection, item_id: str, **fields: Any) -> Item:
    """Merge ``fields`` into the item's data (a None value removes the key)."""
    item = get(conn, item_id)
    data = dict(item.data)
    for key, value in fields.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    conn.execute(
        it.update()
        .where(it.c.id == item_id)
        .values(data=json.dumps(data, ensure_ascii=False), updated_at=now_ms())
    )
    return get(conn, item_id)


def delete_rows(conn: Connection, item_ids: Iterable[str]) -> None:
    """Delete rows (descendants cascade) and reconcile the surviving parents."""
    ids = list(dict.fromkeys(item_ids))
    parents: set[str] = set()
    for part in _chunks(ids):
        parents.update(
            r[0]
            for r in conn.execute(
                sa.select(it.c.group_id).where(it.c.id.in_(part), it.c.group_id.is_not(None))
            )
        )
    # Tombstones for the event stream: every row that goes, cascaded descendants included.
    ts = now_ms()
    for part in _chunks(subtree_ids(conn, ids)):
        rows = conn.execute(sa.select(it.c.base_id, it.c.id).where(it.c.id.in_(part))).all()
        if rows:
            conn.execute(
                tombstone_t.insert(),
                [{"base_id": b, "item_id": i, "deleted_at": ts} for b, i in rows],
            )
    # Deepest first, so the composite FK cascade never meets a half-deleted parent.
    for part in _chunks(ids[::-1]):
        conn.execute(it.delete().where(it.c.id.in_(part)))
    for parent in parents - set(ids):
        reconcile_containers(conn, parent)


def reconcile_containers(conn: Connection, container_id: str | None) -> None:
    """The roll-up of §1.3: walk up from ``container_id`` deriving each container's status."""
    seen: set[str] = set()
    while container_id and container_id not in seen:
        seen.add(container_id)
        row = conn.execute(
            sa.select(it.c.status, it.c.group_id, it.c.base_id).where(it.c.id == container_id)
        ).first()
        if row is None or row.status == "deleting":
            return
        if row.status != "preparing":
            kids = {
                r[0]
                for r in conn.execute(
                    sa.select(it.c.status)
                    # base_id leads the (base_id, group_id) index: without it SQLite scanned
                    # every item of the catalog per roll-up, quadratic over a big import.
                    .where(
                        it.c.base_id == row.base_id,
                        it.c.group_id == container_id,
                        it.c.status != "deleting",
                    )
                    .group_by(it.c.status)
                )
            }
            if any(s not in ("completed", "failed") for s in kids):
                values: dict[str, Any] = {
                    "status": "processing",
                    "error_code": None,
                    "error_message": None,
                }
            elif "failed" in kids:
                values = {
                    "status": "failed",
                    "error_code": CHILD_FAILED[0],
                    "error_message": CHILD_FAILED[1],
                }
            else:
                values = {"status": "completed", "error_code": None, "error_message": None}
            conn.execute(
                it.update()
                .where(it.c.id == container_id, it.c.status != "deleting")
                .values(**values, updated_at=now_ms())
            )
        container_id = row.group_id


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


def deleting_roots(conn: Connection) -> list[Item]:
    """``deleting`` rows whose parent is null, missing, or not deleting (§5 boot recovery)."""
    parent = it.alias("parent")
    q = (
        sa.select(it)
        .select_from(it.outerjoin(parent, parent.c.id == it.c.group_id))
        .where(it.c.status == "deleting")
        .where(
            sa.or_(it.c.group_id.is_(None), parent.c.id.is_(None), parent.c.status != "deleting")
        )
    )
    return [Item.from_row(r) for r in conn.execute(q)]


def count_by_status(conn: Connection, base_id: str) -> dict[str, int]:
    q = sa.select(it.c.status, sa.func.count()).where(it.c.base_id == base_id).group_by(it.c.status)
    return {r[0]: r[1] for r in conn.execute(q)}


# --- organisation tree pages (query/concepts.py walks them; never the whole base) ---------------
def tree_page(
    conn: Connection,
    base_id: str,
    parent_id: str | None,
    *,
    after: tuple[int, str] | None,
    limit: int,
) -> list[Item]:
    """Up to ``limit`` non-deleting children of ``parent_id`` (None: roots), after the
    ``(created_at, id)`` cursor, in that order. Uses ``(base_id, group_id, created_at)``."""
    q = sa.select(it).where(it.c.base_id == base_id, it.c.status != "deleting")
    q = q.where(it.c.group_id.is_(None) if parent_id is None else it.c.group_id == parent_id)
    if after is not None:
        q = q.where(
            sa.or_(
                it.c.created_at > after[0],
                sa.and_(it.c.created_at == after[0], it.c.id > after[1]),
            )
        )
    q = q.order_by(it.c.created_at, it.c.id).limit(limit)
    return [Item.from_row(r) for r in conn.execute(q)]


def orphans_of_deleting(conn: Connection, base_id: str, *, limit: int) -> list[Item]:
    """Non-deleting items whose container is ``deleting`` (the tree shows them as roots)."""
    parent = it.alias("parent")
    q = (
        sa.select(it)
        .join(parent, parent.c.id == it.c.group_id)
        .where(parent.c.base_id == base_id, parent.c.status == "deleting")
        .where(it.c.status != "deleting")
        .order_by(it.c.created_at, it.c.id)
        .limit(limit)
    )
    return [Item.from_row(r) for r in conn.execute(q)]


def count_visible(conn: Connection, base_id: str) -> int:
    """How many items of the base are not ``deleting`` (counted in SQL, nothing loaded)."""
    q = sa.select(sa.func.count()).where(it.c.base_id == base_id, it.c.status != "deleting")
    return int(conn.execute(q).scalar_one())


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

