"""Reads of one item: the row as a user may see it, and its chunks (§7 "listItemChunks")."""

from __future__ import annotations

from knowbase.catalog import items as item_repo
from knowbase.catalog.guards import assert_base_runnable
from knowbase.catalog.models import Base, Item
from knowbase.errors import InvalidInput, NotFound
from knowbase.index.base import UnitRecord
from knowbase.runtime import Runtime


def get_item(rt: Runtime, base: Base, item_id: str) -> Item:
    """The item, unless it belongs to another base or is being deleted (then NotFound)."""
    with rt.catalog.read() as conn:
        item = item_repo.find(conn, item_id)
    if item is None or item.base_id != base.id or item.status == "deleting":
        raise NotFound(f"no knowledge item {item_id!r} in base {base.name!r}", item_id=item_id)
    return item


def list_item_chunks(rt: Runtime, base: Base, item_id: str) -> list[UnitRecord]:
    """Units of a completed item's leaves, in unit order; refused on a failed base, an item
    that is not completed, or a folder part of which is being deleted."""
    assert_base_runnable(base, "listing chunks")
    item = get_item(rt, base, item_id)
    if item.status != "completed":
        raise InvalidInput(f"item {item_id} is {item.status}, not completed", item_id=item_id)
    with rt.catalog.read() as conn:
        rows = item_repo.subtree(conn, [item.id])
    if any(r.status == "deleting" for r in rows):
        raise InvalidInput("part of this folder is being deleted", item_id=item_id)
    store = rt.store(base)
    return [u for r in rows if not r.is_container for u in store.list_units(r.id)]
