"""``reindex_items`` (whole-batch guards, then one reindex-subtree job; §6, DESIGN 1) and
``retry_failed``, which picks what a retry reindexes."""

from __future__ import annotations

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.guards import assert_base_runnable, assert_subtrees_terminal, outermost_roots
from knowbase.catalog.models import Base, Item
from knowbase.operations import kinds
from knowbase.runtime import Runtime, queue_of


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
    return reindex_resolved(rt, base, item_ids, reacquire=reacquire)


def reindex_resolved(
    rt: Runtime, base: Base, item_ids: list[str], *, reacquire: bool = True
) -> str | None:
    """:func:`reindex_items` on a row its caller read and checked (a re-add's update)."""
    with rt.catalog.read() as conn:
        roots = outermost_roots(conn, base, item_ids)
        if not roots:
            return None
        assert_subtrees_terminal(conn, roots)
    root_ids = [r.id for r in roots]
    job = rt.jobs.enqueuer.enqueue_now(
        kinds.REINDEX_SUBTREE.name,
        {"base_id": base.id, "root_item_ids": root_ids, "reacquire": reacquire},
        queue=queue_of(base.id),
        idempotency_key=kinds.reindex_key(base.id, root_ids),
    )
    return job.id


def retry_failed(rt: Runtime, base_id: str) -> str | None:
    """Re-run the base's failed items: one reindex of them, rebuilt from raw/ (``kb retry``).

    A folder that failed only because of its children (``child_failed``) is not selected, so
    just those children are retried; a folder that failed itself (e.g. an interrupted
    expansion) is expanded again. Returns None when nothing failed.
    """
    with rt.catalog.read() as conn:
        failed = item_repo.list_items(conn, base_id, statuses=["failed"])
    ids = [
        i.id
        for i in failed
        if (not i.is_container or i.error_code != "child_failed") and retry_blocker(rt, i) is None
    ]
    if not ids:
        return None
    return reindex_items(rt, base_id, ids, reacquire=False)


def retry_blocker(rt: Runtime, item: Item) -> str | None:
    """Why a retry (a rebuild from the raw/ copy) cannot make this failed item succeed, or None.

    Three cases are certain: a page that was never fetched has no copy to rebuild from (re-add
    or reindex it to fetch it again), a file of a type no reader knows, and a file whose stored
    copy is empty. Anything else may succeed (a busy disk, OCR enabled since, a fixed reader).
    """
    if item.status != "failed" or item.is_container:
        return None
    if item.type in ("url", "sitemap") and not item.relative_path:
        return "nothing was fetched: add the URL again (or reindex it) to fetch it"
    if item.error_code == "unsupported_file_type":
        return "no reader knows this file type"
    rel = item.relative_path
    if item.type == "file" and rel:
        try:
            empty = rt.storage(item.base_id).path_of(rel).stat().st_size == 0
        except OSError:
            return None
        if empty:
            return "the file is empty: add it again once it has content"
    return None
