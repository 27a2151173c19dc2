"""``set_labels``: change an item's tags and metadata after it was added.

Labels live in the item's ``data`` (``catalog/labels.py``); a change is one catalog write and
needs no reindex: searches resolve tag and metadata filters from the catalog, so the next search
sees it. A folder's (or sitemap's) labels apply to everything under it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
from knowbase.operations.changes import record_change
from knowbase.operations.item_refs import find_items, folder_path
from knowbase.runtime import Runtime


def find_labelled_item(rt: Runtime, base: Base, ref: str) -> Item:
    """The item ``ref`` names (:func:`knowbase.operations.item_refs.find_items`)."""
    found, _ = find_items(rt, base, [ref])
    if ref not in found:
        raise NotFound(
            f"no item {ref!r} in base {base.name!r} (give an item id, a Concept ID or a "
            "folder path)",
            item=ref,
        )
    return found[ref]


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
        updated = item_repo.update_data(
            conn, item.id, **{TAGS_KEY: new_tags or None, METADATA_KEY: new_meta or None}
        )
        record_change(conn, base, "labels", {"item": ref, "tags": new_tags, "metadata": new_meta})
        return updated


def label_sources(rt: Runtime, base: Base, ref: str) -> list[dict[str, Any]]:
    """Where the labels of the item ``ref`` names come from, nearest first: the item itself,
    then each folder above it that has labels, as ``{item_id, path, tags, metadata}`` (a
    search sees every tag and, per key, the nearest value)."""
    item = find_labelled_item(rt, base, ref)
    chain = [item]
    with rt.catalog.read() as conn:
        while chain[-1].group_id and len(chain) < 1000:
            parent = item_repo.find(conn, chain[-1].group_id)
            if parent is None:
                break
            chain.append(parent)
    by_id = {i.id: i for i in chain}
    out = []
    for n, current in enumerate(chain):
        tags, metadata = labels_of(current.data)
        if n and not (tags or metadata):
            continue
        path = folder_path(current, by_id) if current.is_container else current.concept_id
        out.append(
            {"item_id": current.id, "path": path or current.title, "tags": tags,
             "metadata": metadata}
        )  # fmt: skip
    return out
