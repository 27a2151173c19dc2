"""Conflict keys for the detect / replace strategies (§6 addItems step 2)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass

from knowbase.catalog.models import Item
from knowbase.files import note_snapshot_slug
from knowbase.operations.add.inputs import AddInput


@dataclass(frozen=True)
class ConflictInfo:
    type: str
    title: str
    item_id: str | None = None  # the existing item, when it is one


def _basename(path: str) -> str:
    return posixpath.basename(path.replace("\\", "/").rstrip("/"))


def _first_line(text: str | None) -> str:
    return next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")


def item_key(item: Item) -> str:
    """Existing roots match on their *deduped* path: ``test_2.md`` never matches ``test.md``."""
    data = item.data
    if item.type in ("file", "directory"):
        key = _basename(data.get("relative_path") or item.source)
    elif item.type == "note":
        snap = data.get("relative_path")
        if snap:
            key = _basename(snap).removesuffix(".md")
        else:
            key = note_snapshot_slug(item.source or _first_line(data.get("content")))
    else:
        key = (data.get("url") or "").strip()
    return f"{item.type}\0{key}" if key else ""


def input_key(inp: AddInput) -> str:
    if inp.type in ("file", "directory"):
        key = _basename(inp.source or inp.path or "")
    elif inp.type == "note":
        key = note_snapshot_slug(inp.source or _first_line(inp.content))
    else:
        key = (inp.url or "").strip()
    return f"{inp.type}\0{key}" if key else ""


def find_conflicts(
    existing_roots: Iterable[Item], inputs: list[AddInput]
) -> tuple[list[ConflictInfo], list[Item], list[AddInput]]:
    """Return (conflicts, colliding existing items, inputs with in-batch last-wins applied)."""
    by_key: dict[str, Item] = {}
    for item in existing_roots:
        k = item_key(item)
        if k:
            by_key.setdefault(k, item)
    conflicts: list[ConflictInfo] = []
    hit_items: dict[str, Item] = {}
    last_index: dict[str, int] = {}
    for i, inp in enumerate(inputs):
        k = input_key(inp)
        if not k:
            continue
        if k in last_index and not any(
            c.item_id is None and c.title == inp.source for c in conflicts
        ):
            conflicts.append(ConflictInfo(inp.type, inp.source))
        last_index[k] = i
        if k in by_key:
            item = by_key[k]
            if item.id not in hit_items:
                hit_items[item.id] = item
                conflicts.append(ConflictInfo(item.type, item.title, item.id))
    kept = [
        inp for i, inp in enumerate(inputs) if not input_key(inp) or last_index[input_key(inp)] == i
    ]
    return conflicts, list(hit_items.values()), kept
