"""Plan and enqueue the job that moves an item forward (§4.3 planning), in the caller's tx.

Any write that makes an item active enqueues its job in the same transaction (DESIGN.md), so
an active item without a live job can only mean its job was interrupted.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import Any

from sqlalchemy.engine import Connection

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.jobs.model import Job
from knowbase.operations import kinds
from knowbase.runtime import Runtime, queue_of


def needs_processing(base: Base, item: Item, *, reacquire: bool = False) -> bool:
    """A file goes through the processor when the base has one and no artifact exists yet,
    or again on a re-acquiring reindex (the re-copied original makes the artifact stale)."""
    from knowbase.pipeline.processing import processable_extensions

    if item.type != "file" or not base.file_processor_id:
        return False
    if item.data.get("indexed_relative_path") and not reacquire:
        return False
    rel = item.data.get("relative_path") or ""
    return posixpath.splitext(rel)[1].lower() in processable_extensions(base.file_processor_id)


def schedule_item(
    rt: Runtime,
    conn: Connection,
    base: Base,
    item: Item,
    *,
    parent_job_id: str | None = None,
    reacquire: bool = False,
) -> Job | None:
    """Enqueue the next job for ``item``; ``deleting`` rows are skipped."""
    plan = _plan(base, item, parent_job_id, reacquire=reacquire)
    if plan is None:
        return None
    kind, payload, key = plan
    return rt.jobs.enqueuer.enqueue(
        conn, kind, payload, queue=queue_of(base.id), idempotency_key=key, parent_id=parent_job_id
    )


def schedule_items(
    rt: Runtime, conn: Connection, base: Base, items: list[Item], *, parent_job_id: str
) -> None:
    """:func:`schedule_item` for many items of one expansion: one INSERT per job kind."""
    by_kind: dict[str, list[tuple[dict[str, Any], str | None]]] = {}
    for item in items:
        plan = _plan(base, item, parent_job_id, reacquire=False)
        if plan is not None:
            kind, payload, key = plan
            by_kind.setdefault(kind, []).append((payload, key))
    for kind, jobs in by_kind.items():
        rt.jobs.enqueuer.enqueue_many(
            conn, kind, jobs, queue=queue_of(base.id), parent_id=parent_job_id
        )


def add_sitemap_pages(
    rt: Runtime, conn: Connection, base: Base, sitemap_id: str, urls: Iterable[str], job_id: str
) -> None:
    """One url row per page under the sitemap, each with its index job (the caller's
    transaction; the caller rolls the sitemap up)."""
    for url in urls:
        leaf = item_repo.insert_active(
            conn,
            base_id=base.id,
            type="url",
            group_id=sitemap_id,
            reconcile=False,
            data={"source": url, "url": url},
            origin=url,
        )
        schedule_item(rt, conn, base, leaf, parent_job_id=job_id)


def _plan(
    base: Base, item: Item, parent_job_id: str | None, *, reacquire: bool
) -> tuple[str, dict[str, Any], str] | None:
    """(job kind, payload, idempotency key) of the job that moves ``item`` forward."""
    if item.status == "deleting":
        return None
    payload: dict[str, Any] = {"base_id": base.id, "item_id": item.id}
    if item.is_container:
        return kinds.PREPARE_ROOT.name, payload, kinds.prepare_key(base.id, item.id)
    if reacquire:
        payload["reacquire"] = True
    if needs_processing(base, item, reacquire=reacquire):
        return kinds.PROCESS_FILE.name, payload, kinds.process_key(base.id, item.id)
    key = kinds.index_key(base.id, item.id, parent_job_id)
    return kinds.INDEX_DOCUMENTS.name, payload, key
