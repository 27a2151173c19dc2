"""``delete_items``: mark subtrees ``deleting`` and enqueue their purge in one transaction (§6)."""

from __future__ import annotations

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.ingestion.guards import outermost_roots
from knowbase.runtime import Runtime, queue_of
from knowbase.tasks import kinds


def delete_items(rt: Runtime, base_id: str, item_ids: list[str]) -> str | None:
    """Hide the items at once and purge them in the background; returns the job id.

    Allowed on a failed base. Any error rolls both the status change and the enqueue back, so
    the rows keep their previous state. ``deleting`` rows are hidden everywhere from now on.
    """
    with rt.catalog.read() as conn:
        base = base_repo.get(conn, base_id)
        roots = outermost_roots(conn, base, item_ids)
    if not roots:
        return None
    root_ids = [r.id for r in roots]
    with rt.lock(base.id), rt.catalog.write_tx() as conn:
        item_repo.mark_deleting(conn, root_ids)
        job = rt.jobs.enqueue(
            conn,
            kinds.DELETE_SUBTREE.name,
            {"base_id": base.id, "root_item_ids": root_ids},
            queue=queue_of(base.id),
            idempotency_key=kinds.delete_key(base.id, root_ids),
        )
    return job.id
