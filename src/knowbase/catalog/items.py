"""Item repository and the status rules of §1.3 (functions over the caller's connection).

Rules enforced here, for every writer:
- nothing leaves ``deleting`` (a write that tries is ignored);
- writing ``failed`` over a subtree skips ``deleting`` rows;
- after a child's status changes its containers are reconciled (the roll-up).

Tree walks (:mod:`~knowbase.catalog.item_tree`), base-wide reads
(:mod:`~knowbase.catalog.item_scope`) and the containers' roll-up
(:mod:`~knowbase.catalog.roll_up`) are modules of their own, re-exported here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog.db import now_ms, unindexed
from knowbase.catalog.item_scope import (
    active_items,
    count_by_status,
    count_files_by_status,
    find_searchable,
    list_items,
    reserved_relative_paths,
    scope_rows,
    searchable_versions,
)
from knowbase.catalog.item_tree import (
    children,
    count_visible,
    deleting_roots,
    orphans_of_deleting,
    subtree_ids,
    tree_page,
)
from knowbase.catalog.item_tree import chunks as _chunks
from knowbase.catalog.models import Item
from knowbase.catalog.roll_up import CHILD_FAILED, reconcile_containers
from knowbase.catalog.schema import ACTIVE_STATUSES, is_container
from knowbase.catalog.schema import item_tombstone as tombstone_t
from knowbase.catalog.schema import knowledge_item as it
from knowbase.errors import NotFound
from knowbase.ids import new_time_id

log = logging.getLogger(__name__)


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


def advance_many(conn: Connection, item_ids: Iterable[str], status: str) -> set[str]:
    """:func:`advance_active` of many items, one statement per chunk of ids: the ids that
    moved (an index batch's ``reading`` and ``embedding``)."""
    if status not in ACTIVE_STATUSES:
        raise ValueError(f"{status!r} is not an active status")
    moved: set[str] = set()
    for part in _chunks(list(item_ids)):
        rows = conn.execute(
            it.update()
            .where(it.c.id.in_(part), unindexed(it.c.status).in_(ACTIVE_STATUSES))
            .values(status=status, error_code=None, error_message=None, updated_at=now_ms())
            .returning(it.c.id)
        )
        moved.update(rows.scalars())
    return moved


def mark_completed_many(conn: Connection, item_ids: list[str]) -> None:
    """:func:`mark_completed` of many leaves in one executemany."""
    if item_ids:
        now = now_ms()
        args = {"new_status": "completed", "new_code": None, "new_message": None, "now": now}
        conn.execute(_SET_STATUS, [{**args, "item_id": item_id} for item_id in item_ids])


def mark_completed(conn: Connection, item_id: str) -> bool:
    """``completed`` for a leaf whose row the caller read in this transaction (no roll-up:
    the caller reconciles the container once for many); never out of ``deleting``."""
    args = {"item_id": item_id, "new_status": "completed", "new_code": None, "new_message": None}
    return bool(conn.execute(_SET_STATUS, {**args, "now": now_ms()}).rowcount)


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
                unindexed(it.c.status).in_(allowed) if allowed is not None else sa.true(),
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


def move_under(conn: Connection, item_id: str, group_id: str, data: dict[str, Any]) -> Item:
    """Make a root the child of folder ``group_id`` with new ``data``, ``processing`` again (a
    folder adopting a file the base held alone: issue 42); the caller reconciles the folder."""
    conn.execute(
        it.update()
        .where(it.c.id == item_id, it.c.status != "deleting")
        .values(
            group_id=group_id,
            data=json.dumps(data, ensure_ascii=False),
            status="processing",
            error_code=None,
            error_message=None,
            updated_at=now_ms(),
        )
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


# The reads live in their own modules; ``item_repo.X`` keeps naming them for every caller.
__all__ = [
    "CHILD_FAILED",
    "active_items",
    "advance_active",
    "advance_many",
    "children",
    "count_by_status",
    "count_files_by_status",
    "count_visible",
    "delete_rows",
    "deleting_roots",
    "fail_items",
    "find",
    "find_many",
    "find_searchable",
    "get",
    "insert_active",
    "insert_active_many",
    "list_items",
    "mark_completed",
    "mark_completed_many",
    "mark_deleting",
    "move_under",
    "orphans_of_deleting",
    "reconcile_containers",
    "reserved_relative_paths",
    "scope_rows",
    "searchable_versions",
    "set_status",
    "set_statuses_raw",
    "subtree",
    "subtree_ids",
    "tree_page",
    "update_data",
]
