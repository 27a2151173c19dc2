"""``delete_items``: mark subtrees ``deleting`` and enqueue their purge in one transaction (§6).

A user deleting a file or sub-folder of a synced folder (or a page of a sitemap) has decided it
does not belong in the base: its origin is recorded on the top folder or sitemap
(``SYNC_EXCLUDED_KEY``) in the same transaction, so ``kb sync`` never adds it back.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.guards import outermost_roots
from knowbase.catalog.models import Base, Item
from knowbase.operations import kinds
from knowbase.operations.item_refs import find_items
from knowbase.runtime import Runtime, queue_of


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
        _record_exclusions(conn, roots)
        item_repo.mark_deleting(conn, root_ids)
        job = rt.jobs.enqueuer.enqueue(
            conn,
            kinds.DELETE_SUBTREE.name,
            {"base_id": base.id, "root_item_ids": root_ids},
            queue=queue_of(base.id),
            idempotency_key=kinds.delete_key(base.id, root_ids),
        )
    return job.id


def delete_refs(rt: Runtime, base: Base, refs: list[str]) -> dict[str, Any]:
    """Delete what each ref names (an item id, Concept ID, folder path, origin path or URL:
    :func:`~knowbase.operations.item_refs.find_items`) in one job: ``{"applied": the refs
    that named an item, "not_found": the rest, "job_id"}``."""
    found, missing = find_items(rt, base, refs)
    ids = list(dict.fromkeys(i.id for i in found.values()))
    job_id = delete_items(rt, base.id, ids) if ids else None
    return {"applied": list(found), "not_found": missing, "job_id": job_id}


SYNC_EXCLUDED_KEY = "sync_excluded"  # top folder data: origin paths the user deleted


def _record_exclusions(conn: Connection, roots: list[Item]) -> None:
    """Add each deleted item's origin path to its top folder's exclusions."""
    added: dict[str, list[str]] = {}
    for root in roots:
        path = root.origin if root.type in ("file", "url") else root.source
        if root.group_id is None or not path:
            continue  # a top-level item: nothing syncs it back
        top = item_repo.get(conn, root.group_id)
        while top.group_id is not None:
            top = item_repo.get(conn, top.group_id)
        if top.type in ("directory", "sitemap"):
            added.setdefault(top.id, []).append(str(path))
    for top_id, paths in added.items():
        top = item_repo.get(conn, top_id)
        known = list(top.data.get(SYNC_EXCLUDED_KEY) or [])
        merged = known + [p for p in paths if p not in known]
        item_repo.update_data(conn, top_id, **{SYNC_EXCLUDED_KEY: merged})
