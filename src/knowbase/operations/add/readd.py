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
    found — files changed, new, vanished, unchanged — how many items are fetched again, and how
    many roots were still being added and resume where they stopped)."""
    from knowbase.operations.sync.workflow import sync_base

    # A root still active was being added when its process died (or is being added by another
    # process): its jobs belong to the home, not to that process, so they resume — this add's
    # wait runs them (its workers re-queue a dead process's jobs first) instead of refusing a
    # re-add that "cannot reindex until the subtree is completed or failed" (issue 37 item 4).
    resumed = [r for r in known if r.status not in ("completed", "failed")]
    synced = [
        r
        for r in known
        if r not in resumed
        and r.type in ("file", "directory")
        and (r.status == "completed" or r.error_code == "child_failed")
    ]
    refetched = [r for r in known if r not in synced and r not in resumed]
    jobs: list[str] = []
    found = {
        "changed": 0,
        "new": 0,
        "vanished": 0,
        "unchanged": 0,
        "refetched": len(refetched),
        "resumed": len(resumed),
    }
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
    if resumed:
        jobs.extend(unfinished_jobs(rt, base_id))
    return jobs, found


def unfinished_jobs(rt: Runtime, base_id: str) -> list[str]:
    """The base's unfinished jobs, after the recovery sweep put a dead process's running jobs
    back in the queue: what a caller waits on (its workers run them) to resume an import."""
    from knowbase.jobs.listing import ACTIVE
    from knowbase.operations.recovery import sweep
    from knowbase.runtime import queue_of

    sweep(rt)
    found = rt.jobs.list_jobs(queue=queue_of(base_id), statuses=list(ACTIVE), limit=1_000_000)
    return [j.id for j in found]


def known_roots(rt: Runtime, base_id: str) -> list[Item]:
    with rt.catalog.read() as conn:
        return item_repo.list_items(conn, base_id, roots_only=True)
