"""``knowledge.delete-subtree``: cancel the subtree's jobs, then purge it (§5). Irreversible."""

from __future__ import annotations

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.jobs.context import JobContext
from knowbase.operations.purge import cancel_subtree_jobs, purge_rows
from knowbase.runtime import Runtime


def delete_subtree(rt: Runtime, ctx: JobContext) -> None:
    """Remove the items' files and index rows. No on_settled: rows stay hidden as ``deleting``."""
    base_id = ctx.payload["base_id"]
    root_ids = list(ctx.payload["root_item_ids"])
    with rt.catalog.read() as conn:
        base = base_repo.find(conn, base_id)
        if base is None:
            return
        rows = [r for r in item_repo.subtree(conn, root_ids) if r.status == "deleting"]
    if not rows:
        return
    ctx.progress("cancelling", 0, items=len(rows))
    cancel_subtree_jobs(rt, base_id, root_ids, exclude_job_id=ctx.job.id)
    ctx.progress("purging", 30, items=len(rows))
    with rt.lock(base_id):
        if not ctx.is_current_attempt():
            return
        with rt.catalog.write_tx() as conn:
            rows = [r for r in item_repo.subtree(conn, root_ids) if r.status == "deleting"]
            purge_rows(rt, conn, base, rows)
        store = rt.store_if_exists(base)
        if store is not None:
            store.reclaim()
    ctx.progress("done", 100, items=len(rows))
