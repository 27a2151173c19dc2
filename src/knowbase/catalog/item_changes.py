"""What changed among a base's items, for the event stream: light state rows and tombstones.

``interfaces/http/events.py`` reads these through ``Knowledge`` (never the tables): a first
snapshot page by page, then only rows whose ``updated_at`` moved and the ids that
``items.delete_rows`` left a tombstone for.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog.schema import item_tombstone as tombstone_t
from knowbase.catalog.schema import knowledge_item as it

_CHUNK = 500

#: What a progress view needs of an item: no ``data`` (a note's whole text).
STATE_COLUMNS = (
    it.c.id,
    it.c.group_id,
    it.c.type,
    it.c.status,
    it.c.error_code,
    it.c.error_message,
    it.c.updated_at,
)


def item_states(
    conn: Connection, base_id: str, *, after_id: str | None = None, limit: int = _CHUNK
) -> list[dict[str, Any]]:
    """A page of the base's items as :data:`STATE_COLUMNS` dicts, by id after ``after_id``."""
    q = sa.select(*STATE_COLUMNS).where(it.c.base_id == base_id)
    if after_id is not None:
        q = q.where(it.c.id > after_id)
    return [dict(r._mapping) for r in conn.execute(q.order_by(it.c.id).limit(limit))]


def changed_item_states(
    conn: Connection,
    base_id: str,
    *,
    since_ms: int,
    after: tuple[int, str] | None = None,
    limit: int = _CHUNK,
) -> list[dict[str, Any]]:
    """A page of the base's items with ``updated_at >= since_ms``, in ``(updated_at, id)``
    order; ``after`` is the last row's ``(updated_at, id)`` of the previous page."""
    q = sa.select(*STATE_COLUMNS).where(it.c.base_id == base_id, it.c.updated_at >= since_ms)
    if after is not None:
        q = q.where(
            sa.or_(
                it.c.updated_at > after[0],
                sa.and_(it.c.updated_at == after[0], it.c.id > after[1]),
            )
        )
    q = q.order_by(it.c.updated_at, it.c.id).limit(limit)
    return [dict(r._mapping) for r in conn.execute(q)]


def deleted_item_ids(conn: Connection, base_id: str, *, since_ms: int) -> list[str]:
    """Ids of the base's items deleted at or after ``since_ms`` (tombstones)."""
    q = sa.select(tombstone_t.c.item_id).where(
        tombstone_t.c.base_id == base_id, tombstone_t.c.deleted_at >= since_ms
    )
    return list(dict.fromkeys(conn.execute(q.order_by(tombstone_t.c.deleted_at)).scalars()))


def prune_tombstones(conn: Connection, *, before_ms: int) -> int:
    """Drop tombstones older than ``before_ms``; returns how many."""
    return conn.execute(tombstone_t.delete().where(tombstone_t.c.deleted_at < before_ms)).rowcount
