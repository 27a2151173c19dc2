"""Walks of the item tree by ``group_id``: children, whole subtrees, and the organisation tree's
pages (search/concepts.py walks them a page at a time; never the whole base).

Reads only, over the caller's connection; the status rules live in :mod:`knowbase.catalog.items`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog.models import Item
from knowbase.catalog.schema import knowledge_item as it

_CHUNK = 500


def chunks(values: Sequence[str], size: int = _CHUNK) -> Iterable[Sequence[str]]:
    """``values`` in slices of ``size``: ids per ``IN (...)``, well under SQLite's limit."""
    for i in range(0, len(values), size):
        yield values[i : i + size]


def children(conn: Connection, item_id: str) -> list[Item]:
    q = sa.select(it).where(it.c.group_id == item_id).order_by(it.c.created_at, it.c.id)
    return [Item.from_row(r) for r in conn.execute(q)]


def subtree_ids(conn: Connection, root_ids: Iterable[str]) -> list[str]:
    """Roots and every descendant (recursive CTE; portable to PostgreSQL)."""
    roots = list(dict.fromkeys(root_ids))
    found: list[str] = []
    for part in chunks(roots):
        tree = sa.select(it.c.id).where(it.c.id.in_(part)).cte("tree", recursive=True)
        tree = tree.union_all(sa.select(it.c.id).where(it.c.group_id == tree.c.id))
        found.extend(r[0] for r in conn.execute(sa.select(tree.c.id)))
    return list(dict.fromkeys(found))


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


# --- organisation tree pages (search/concepts.py walks them; never the whole base) ---------------
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
