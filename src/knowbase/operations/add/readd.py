"""Re-adding a source the base already holds updates it instead of copying it (DESIGN turn 3).

``kb add`` of a folder, file or page whose origin (absolute path or URL) a root item of the base
already has does not make ``DIR_1``: a completed folder or file is synced (only changed files are
reindexed, new ones added, vanished ones reported), and a page or an item that failed is
re-acquired from its origin (a reindex that re-fetches / re-copies / rescans). The conflict
strategy ``update`` selects this; ``rename`` still copies.
"""

from __future__ import annotations

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Item
from knowbase.operations.add.inputs import AddInput
from knowbase.operations.reindex.workflow import reindex_items
from knowbase.runtime import Runtime


def split_known(roots: list[Item], inputs: list[AddInput]) -> tuple[list[Item], list[AddInput]]:
    """(root items some input re-adds, the inputs that are new). Notes never match."""
    by_origin = {(r.type, r.origin): r for r in roots if r.origin}
    known: dict[str, Item] = {}
    fresh: list[AddInput] = []
    for inp in inputs:
        hit = by_origin.get((inp.type, inp.origin)) if inp.origin else None
        if hit is None:
            fresh.append(inp)
        else:
            known.setdefault(hit.id, hit)
    return list(known.values()), fresh


def update_known(rt: Runtime, base_id: str, known: list[Item]) -> tuple[list[str], dict[str, int]]:
    """Schedule the update of each re-added root: (job ids, none when up to date; what the sync
    found — files changed, new, vanished, unchanged — and how many items are fetched again)."""
    from knowbase.operations.sync.workflow import sync_base

    synced = [
        r
        for r in known
        if r.type in ("file", "directory")
        and (r.status == "completed" or r.error_code == "child_failed")
    ]
    refetched = [r for r in known if r not in synced]
    jobs: list[str] = []
    found = {"changed": 0, "new": 0, "vanished": 0, "unchanged": 0, "refetched": len(refetched)}
    if synced:
        report = sync_base(rt, base_id, only={r.id for r in synced})
        found.update(
            changed=len(report.changed),
            new=len(report.added),
            vanished=len(report.vanished),
            unchanged=len(report.unchanged),
        )
        if report.job_id:
            jobs.append(report.job_id)
    if refetched:
        job_id = reindex_items(rt, base_id, [r.id for r in refetched], reacquire=True)
        if job_id:
            jobs.append(job_id)
    return jobs, found


def known_roots(rt: Runtime, base_id: str) -> list[Item]:
    with rt.catalog.read() as conn:
        return item_repo.list_items(conn, base_id, roots_only=True)
