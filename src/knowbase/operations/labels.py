"""``set_labels``: change an item's tags and metadata after it was added.

Labels live in the item's ``data`` (``catalog/labels.py``); a change is one catalog write and
needs no reindex: searches resolve tag and metadata filters from the catalog, so the next search
sees it. A folder's (or sitemap's) labels apply to everything under it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any

from knowbase.catalog import items as item_repo
from knowbase.catalog.labels import (
    METADATA_KEY,
    TAGS_KEY,
    labels_of,
    normalize_metadata,
    normalize_tags,
)
from knowbase.catalog.models import Base, Item
from knowbase.errors import NotFound
from knowbase.runtime import Runtime


def find_labelled_item(rt: Runtime, base: Base, ref: str) -> Item:
    """The item ``ref`` names: an item id, a document's Concept ID or a folder's path."""
    with rt.catalog.read() as conn:
        item = item_repo.find(conn, ref)
        if item is not None and item.base_id == base.id and item.status != "deleting":
            return item
        path = ref.strip().strip("/")
        items = [i for i in item_repo.list_items(conn, base.id) if i.status != "deleting"]
    by_id = {i.id: i for i in items}
    for candidate in items:
        if candidate.concept_id == path:
            return candidate
        if candidate.is_container and folder_path(candidate, by_id) == path:
            return candidate
    raise NotFound(
        f"no item {ref!r} in base {base.name!r} (give an item id, a Concept ID or a folder path)",
        item=ref,
    )


def folder_path(item: Item, by_id: dict[str, Item]) -> str | None:
    """A container's path inside the base: the top folder's own prefix, then the names of
    the sub-folders below it (sub-folder rows keep only their origin path as ``source``)."""
    names: list[str] = []
    current: Item | None = item
    while current is not None and len(names) < 1000:
        if current.relative_path:
            return posixpath.join(current.relative_path, *reversed(names))
        names.append(PurePath(current.source.replace("\\", "/")).name)
        current = by_id.get(current.group_id or "")
    return None


def set_labels(
    rt: Runtime,
    base: Base,
    ref: str,
    *,
    tags: Iterable[str] | None = None,
    add_tags: Iterable[str] = (),
    remove_tags: Iterable[str] = (),
    metadata: Mapping[str, Any] | None = None,
    merge_metadata: Mapping[str, Any] | None = None,
) -> Item:
    """Replace (``tags``, ``metadata``) or edit (``add_tags``, ``remove_tags``,
    ``merge_metadata`` — a None value removes its key) an item's labels; returns the item.

    Everything is checked before the write (``InvalidInput``); the write is one transaction.
    """
    item = find_labelled_item(rt, base, ref)
    with rt.catalog.write_tx() as conn:
        current = item_repo.get(conn, item.id)
        own_tags, own_meta = labels_of(current.data)
        new_tags = normalize_tags(tags) if tags is not None else own_tags
        removed = {t.casefold() for t in normalize_tags(list(remove_tags))}
        new_tags = normalize_tags(
            [t for t in new_tags if t.casefold() not in removed] + list(add_tags)
        )
        new_meta = normalize_metadata(metadata) if metadata is not None else own_meta
        if merge_metadata:
            merged = {**new_meta, **dict(merge_metadata)}
            new_meta = normalize_metadata(merged)
        return item_repo.update_data(
            conn, item.id, **{TAGS_KEY: new_tags or None, METADATA_KEY: new_meta or None}
        )
