"""``knowledge.reindex-subtree``: reset terminal subtrees and schedule them again (§5, DESIGN 1).

Folders whose origin still exists are rescanned (prepare-root); leaves re-acquire their origin
in index-documents when asked. A vanished origin never refuses the batch: the item is rebuilt
from its raw/ copy and reports ``origin_missing``.
"""

from __future__ import annotations

from pathlib import Path

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Item
from knowbase.jobs.context import JobContext
from knowbase.jobs.model import Job
from knowbase.operations.common import failure_of
from knowbase.operations.scheduling import schedule_item
from knowbase.runtime import Runtime


def _can_rescan(item: Item) -> bool:
    if item.type == "sitemap":
        return True
    return bool(item.origin) and Path(item.origin).is_dir()


def reindex_subtree(rt: Runtime, ctx: JobContext) -> None:
    base_id = ctx.payload["base_id"]
    root_ids = list(ctx.payload["root_item_ids"])
    reacquire = bool(ctx.payload.get("reacquire", True))
    scheduled = 0
    origin_missing: list[str] = []
    with rt.lock(base_id), rt.catalog.write_tx() as conn:
        base = base_repo.find(conn, base_id)
        if base is None or base.status == "failed":
            return
        rows = item_repo.subtree(conn, root_ids)
        if not rows or any(r.status == "deleting" for r in rows):
            return
        by_id = {r.id: r for r in rows}
        for root_id in root_ids:
            root = by_id.get(root_id)
            if root is None:
                continue
            if not root.is_container:
                item_repo.set_status(conn, root.id, "processing")
                schedule_item(
                    rt,
                    conn,
                    base,
                    item_repo.get(conn, root.id),
                    parent_job_id=ctx.job.id,
                    reacquire=reacquire,
                )
                scheduled += 1
                continue
            # A folder whose own expansion failed can only be fixed by expanding it again.
            expansion_failed = root.status == "failed" and root.error_code != "child_failed"
            if (reacquire or expansion_failed) and _can_rescan(root):
                item_repo.set_statuses_raw(conn, [root.id], "preparing")
                schedule_item(
                    rt, conn, base, item_repo.get(conn, root.id), parent_job_id=ctx.job.id
                )
                scheduled += 1
                continue
            if reacquire:
                origin_missing.append(root.id)
            tree = item_repo.subtree(conn, [root.id])
            item_repo.set_statuses_raw(conn, [r.id for r in tree], "processing")
            for leaf in (r for r in tree if not r.is_container):
                schedule_item(
                    rt, conn, base, item_repo.get(conn, leaf.id), parent_job_id=ctx.job.id
                )
                scheduled += 1
        for item_id in origin_missing:
            item_repo.update_data(conn, item_id, warning="origin_missing")
    ctx.progress("done", 100, scheduled=scheduled, origin_missing=len(origin_missing))


def make_reindex_on_settled(rt: Runtime):  # type: ignore[no-untyped-def]
    """Roots left ``preparing``/``processing`` with no active child job become ``failed``."""

    def on_settled(job: Job, status: str, error: BaseException | None) -> None:
        code, message = failure_of(status, error, job.error_code)
        if status != "cancelled":
            message = f"Reindex job {status}: {message}"
        children = {
            c.payload.get("item_id") for c in rt.jobs.queries.children(job.id) if not c.is_terminal
        }
        with rt.catalog.write_tx() as conn:
            for root in item_repo.find_many(conn, job.payload.get("root_item_ids", [])).values():
                if root.status in ("preparing", "processing") and root.id not in children:
                    tree = item_repo.subtree(conn, [root.id])
                    active = [
                        r.id
                        for r in tree
                        if r.status in ("preparing", "processing") and r.id not in children
                    ]
                    item_repo.fail_items(conn, active, code, message)

    return on_settled
