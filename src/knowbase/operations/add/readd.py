"""Re-adding a source the base already holds updates it instead of copying it (DESIGN turn 3).

``kb add`` of a folder, file or page whose origin (absolute path or URL) a root item of the base
already has does not make ``DIR_1``: a completed folder or file is synced (only changed files are
reindexed, new ones added, vanished ones reported), and a page or an item that failed is
re-acquired from its origin (a reindex that re-fetches / re-copies / rescans). The conflict
strategy ``update`` selects this; ``rename`` still copies.

A file that lies inside an added folder is covered too (issue 42): its origin is the folder
item's file, so ``kb add B corpus/a.pdf`` after ``kb add B corpus`` updates that file in place
instead of adding a second ``a.pdf`` whose passages would rank twice. The reverse order, the
folder added after the file, is the folder's expansion's to settle: it adopts the file's item
(``operations/add/adopt.py``).
"""

from __future__ import annotations

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.operations.add.inputs import AddInput
from knowbase.operations.reindex.workflow import reindex_resolved
from knowbase.operations.sync.resume import unfinished_jobs
from knowbase.operations.sync.workflow import sync_resolved
from knowbase.runtime import Runtime


def split_known(items: list[Item], inputs: list[AddInput]) -> tuple[list[Item], list[AddInput]]:
    """(items some input re-adds, the inputs that are new). Notes never match.

    A root matches by origin, and so does a file inside a folder: a root wins when both hold
    the origin (an older base may have added the file alone too).
    """
    by_origin: dict[tuple[str, str | None], Item] = {}
    for r in sorted(items, key=lambda r: r.group_id is not None):  # roots first
        if r.origin and (r.group_id is None or r.type == "file"):
            by_origin.setdefault((r.type, r.origin), r)
    known: dict[str, Item] = {}
    fresh: list[AddInput] = []
    for inp in inputs:
        hit = by_origin.get((inp.type, inp.origin)) if inp.origin else None
        if hit is None:
            fresh.append(inp)
        else:
            known.setdefault(hit.id, hit)
    return list(known.values()), fresh


def update_known(rt: Runtime, base: Base, known: list[Item]) -> tuple[list[str], dict[str, int]]:
    """Schedule the update of each re-added root: (job ids, none when up to date; what the sync
    found — files changed, new, vanished, unchanged — how many items are fetched again, and how
    many roots were still being added and resume where they stopped).

    ``base`` is the row the add read and checked: the sync and the reindex take it as it is
    instead of reading it again (issue 38 item 5)."""
    # A file inside a folder that is re-added too is already the folder's sync: updating it
    # alone as well would plan it twice.
    roots = {r.id for r in known if r.group_id is None}
    known = [r for r in known if r.group_id is None or not _under(r, roots, known)]
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
        report = sync_resolved(rt, base, only={r.id for r in synced})
        found.update(
            changed=len(report.changed),
            new=len(report.added),
            vanished=len(report.vanished),
            unchanged=len(report.unchanged),
        )
        if report.job_id:
            jobs.append(report.job_id)
    if refetched:
        job_id = reindex_resolved(rt, base, [r.id for r in refetched], reacquire=True)
        if job_id:
            jobs.append(job_id)
    if resumed:
        jobs.extend(j.id for j in unfinished_jobs(rt, base.id))
    return jobs, found


def _under(item: Item, roots: set[str], known: list[Item]) -> bool:
    """Whether ``item`` (a file in a folder) lies under a folder root that is re-added too."""
    folders = [r for r in known if r.id in roots and r.type == "directory" and r.origin]
    return any(str(item.origin).startswith(str(f.origin).rstrip("/") + "/") for f in folders)


def known_items(rt: Runtime, base_id: str, inputs: list[AddInput]) -> list[Item]:
    """The items a re-add may match: the roots, and the files inside added folders that an
    input names (looked up by origin: a base may hold 100k files)."""
    files = [i.origin for i in inputs if i.type == "file" and i.origin]
    with rt.catalog.read() as conn:
        roots = item_repo.list_items(conn, base_id, roots_only=True)
        inside = item_repo.list_items(conn, base_id, origins=files) if files else []
    seen = {r.id for r in roots}
    return roots + [r for r in inside if r.id not in seen and r.type == "file"]
