"""Which item a person means: an item id, a document's Concept ID, a folder's path (the prefix
``kb tree``, ``--under`` and ``kb label`` use), or the path or URL it was added from.

One resolver for every command that names items (``kb label``, ``kb rm``), so a name one
command accepts is never "not found" for another (issue 42).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from pathlib import PurePath

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.runtime import Runtime


def find_items(rt: Runtime, base: Base, refs: Iterable[str]) -> tuple[dict[str, Item], list[str]]:
    """({ref: the item it names}, the refs that name nothing), deleting items left out.

    A ref is tried as an item id, then a Concept ID, a folder path, an origin (absolute path
    or URL) and a source, in that order; the first item (oldest) that matches wins.
    """
    wanted = list(dict.fromkeys(refs))
    found: dict[str, Item] = {}
    with rt.catalog.read() as conn:
        for ref, item in item_repo.find_many(conn, wanted).items():
            if item.base_id == base.id and item.status != "deleting":
                found[ref] = item
        rest = [r for r in wanted if r not in found]
        items = (
            [i for i in item_repo.list_items(conn, base.id) if i.status != "deleting"]
            if rest
            else []
        )
    by_id = {i.id: i for i in items}
    names: dict[str, Item] = {}
    for i in items:  # later kinds of name never shadow earlier ones
        if i.concept_id:
            names.setdefault(i.concept_id, i)
    for i in items:
        if i.is_container:
            path = folder_path(i, by_id)
            if path:
                names.setdefault(path, i)
    for i in items:
        for name in (i.origin, i.source):
            if name:
                names.setdefault(name, i)
    missing = []
    for ref in rest:
        hit = names.get(ref) or names.get(ref.strip().strip("/"))
        if hit is None:
            missing.append(ref)
        else:
            found[ref] = hit
    return {r: found[r] for r in wanted if r in found}, missing


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
