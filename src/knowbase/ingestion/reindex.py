"""``reindex_items``: whole-batch guards, then one reindex-subtree job (§6, DESIGN 1)."""

from __future__ import annotations

from knowbase.catalog import bases as base_repo
from knowbase.ingestion.guards import (
    assert_base_runnable,
    assert_subtrees_terminal,
    outermost_roots,
)
from knowbase.runtime import Runtime, queue_of
from knowbase.tasks import kinds


def reindex_items(
    rt: Runtime, base_id: str, item_ids: list[str], *, reacquire: bool = True
) -> str | None:
    """Rebuild the items' index. ``reacquire`` re-reads each origin first when it still exists.

    Enabling a model, changing chunk settings and ``kb retry`` pass ``reacquire=False``: they
    rebuild from the raw/ copies. Nothing is written before the enqueue.
    """
    with rt.catalog.read() as conn:
        base = base_repo.get(conn, base_id)
        assert_base_runnable(base, "reindexing")
        roots = outermost_roots(conn, base, item_ids)
        if not roots:
            return None
        assert_subtrees_terminal(conn, roots)
    root_ids = [r.id for r in roots]
    job = rt.jobs.enqueue_now(
        kinds.REINDEX_SUBTREE.name,
        {"base_id": base.id, "root_item_ids": root_ids, "reacquire": reacquire},
        queue=queue_of(base.id),
        idempotency_key=kinds.reindex_key(base.id, root_ids),
    )
    return job.id
