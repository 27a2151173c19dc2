"""What a sync must do: compare what a base holds with what its origins hold now (pure).

The caller gathers plain data at the edge — for every file item its raw/ copy's size and the
origin stamp recorded when that copy was last confirmed equal to the origin; for every origin
file its size and mtime — then asks :func:`needs_hash` which files the stamps cannot decide,
hashes just those, and calls :func:`plan_sync`. Size + mtime decide first (a stamp equal to the
origin's stat means unchanged; a size unlike the raw copy's means changed); the content hash
confirms everything else, so a touched-but-identical file is never reindexed.

Keys are origin paths (absolute, as the items store them). Nothing here reads a disk.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Statuses a sync may act on; an item still moving is left to its running job.
SETTLED = ("completed", "failed")


@dataclass(frozen=True)
class Stamp:
    """An origin file's size and mtime (ns) at the moment its raw/ copy was known equal."""

    size: int
    mtime_ns: int


@dataclass(frozen=True)
class HeldFile:
    """A file item the base holds: its raw/ copy's size (None: the copy is missing)."""

    key: str
    item_id: str
    status: str
    raw_size: int | None
    stamp: Stamp | None = None


@dataclass(frozen=True)
class FoundFile:
    """An origin file as it is now."""

    key: str
    size: int
    mtime_ns: int

    @property
    def stamp(self) -> Stamp:
        return Stamp(self.size, self.mtime_ns)


@dataclass(frozen=True)
class Change:
    item_id: str
    key: str
    reason: str  # size | content | raw_missing | failed


@dataclass
class SyncPlan:
    """The decision for one scope (a folder item, or the standalone file items)."""

    added: list[str] = field(default_factory=list)  # origin keys with no item
    changed: list[Change] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # item ids
    vanished: list[Change] = field(default_factory=list)  # reason "vanished"
    busy: list[str] = field(default_factory=list)  # item ids still indexing: left alone
    # unchanged items whose stamp should be (re)recorded, so the next sync needs no hash
    restamp: dict[str, Stamp] = field(default_factory=dict)


def _undecided(held: HeldFile, found: FoundFile) -> bool:
    """Neither the stamp nor the size settles it: only the content hash can."""
    if held.status not in SETTLED or held.status == "failed" or held.raw_size is None:
        return False
    if held.raw_size != found.size:
        return False
    return held.stamp != found.stamp


def needs_hash(held: Mapping[str, HeldFile], found: Mapping[str, FoundFile]) -> list[str]:
    """The keys whose origin and raw/ copy must be hashed before :func:`plan_sync`."""
    return sorted(k for k, h in held.items() if k in found and _undecided(h, found[k]))


def plan_sync(
    held: Mapping[str, HeldFile],
    found: Mapping[str, FoundFile],
    same_content: Mapping[str, bool] | None = None,
) -> SyncPlan:
    """Classify every held and found file. ``same_content`` answers each key of
    :func:`needs_hash` (True: the origin's hash equals the raw/ copy's); a missing answer is a
    ``KeyError`` — guessing would either reindex for nothing or miss a change."""
    same_content = same_content or {}
    plan = SyncPlan()
    for key in sorted(found.keys() - held.keys()):
        plan.added.append(key)
    for key in sorted(held):
        h = held[key]
        f = found.get(key)
        if h.status not in SETTLED:
            plan.busy.append(h.item_id)
        elif f is None:
            plan.vanished.append(Change(h.item_id, key, "vanished"))
        elif h.status == "failed":
            plan.changed.append(Change(h.item_id, key, "failed"))
        elif h.raw_size is None:
            plan.changed.append(Change(h.item_id, key, "raw_missing"))
        elif h.raw_size != f.size:
            plan.changed.append(Change(h.item_id, key, "size"))
        elif h.stamp == f.stamp:
            plan.unchanged.append(h.item_id)
        elif same_content[key]:
            plan.unchanged.append(h.item_id)
            plan.restamp[h.item_id] = f.stamp
        else:
            plan.changed.append(Change(h.item_id, key, "content"))
    return plan
