"""A folder adopts the files the base already held alone (issue 42 item 3, the reverse order).

``kb add B corpus/office/travel-policy.pdf`` then ``kb add B corpus``: the folder's expansion
meets a file whose origin a root file item of the base already has. A second item would hold
the same file twice (its passages ranking twice); replacing the first would lose its id, its
labels and its history. The folder *adopts* it instead: the same item becomes the folder's
child — its Concept ID moves under the folder's, its raw copy is the folder's fresh one, its
tags and metadata stay — and is indexed again (its vectors are reused by content hash).

The expansion (``prepare_root.py``) writes no row for such a file and copies it in like the
others; its last transaction, the one that hands the folders their real status, moves the
items under their folders (:func:`adopt`), so an expansion that fails part-way leaves them
alone, as they were. Only a settled item (``completed`` or ``failed``) is adopted: one still
being added has a job of its own running, and gets a child of its own as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Item

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

SETTLED = ("completed", "failed")
# What the item's data says of its own copy; the folder's copy replaces it.
_COPY_KEYS = ("source", "relative_path", "indexed_relative_path", "as_text")


@dataclass(frozen=True)
class Adoption:
    """A root file item to move under folder ``group_id`` with the copy at ``relative_path``."""

    item_id: str
    group_id: str
    source: str
    relative_path: str
    as_text: bool = False


def standalone_files(conn: Connection, base_id: str, origins: list[str]) -> dict[str, Item]:
    """The settled root file items of the base whose origin is one of ``origins``, by origin."""
    if not origins:
        return {}
    rows = item_repo.list_items(conn, base_id, roots_only=True, origins=origins)
    return {r.origin: r for r in rows if r.type == "file" and r.origin and r.status in SETTLED}


def adopt(conn: Connection, adoptions: list[Adoption]) -> tuple[list[Item], list[str]]:
    """Move each item under its folder, in the caller's transaction: (the items moved, the raw
    paths of their old copies, to delete once it commits). An item that is no longer a settled
    root (deleted, re-added meanwhile) is left alone; its file then has no row under the
    folder, which the folder's next sync adds."""
    moved: list[Item] = []
    old: list[str] = []
    for a in adoptions:
        item = item_repo.find(conn, a.item_id)
        if item is None or item.group_id is not None or item.status not in SETTLED:
            continue
        data = {k: v for k, v in item.data.items() if k not in _COPY_KEYS}
        data.update(source=a.source, relative_path=a.relative_path)
        if a.as_text:
            data["as_text"] = True
        moved.append(item_repo.move_under(conn, item.id, a.group_id, data))
        old.extend(p for p in (item.data.get(k) for k in _COPY_KEYS[1:3]) if p)
    return moved, old
