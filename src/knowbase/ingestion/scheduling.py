"""Plan and enqueue the job that moves an item forward (§4.3 planning), in the caller's tx.

Any write that makes an item active enqueues its job in the same transaction (DESIGN.md), so
an active item without a live job can only mean its job was interrupted.
"""

from __future__ import annotations

import posixpath

from sqlalchemy.engine import Connection

from knowbase.catalog.models import Base, Item
from knowbase.jobs.model import Job
from knowbase.runtime import Runtime, queue_of
from knowbase.tasks import kinds


def needs_processing(base: Base, item: Item, *, reacquire: bool = False) -> bool:
    """A file goes through the processor when the base has one and no artifact exists yet,
    or again on a re-acquiring reindex (the re-copied original makes the artifact stale)."""
    from knowbase.pipeline.readers import PROCESSABLE_EXTENSIONS

    if item.type != "file" or not base.file_processor_id:
        return False
    if item.data.get("indexed_relative_path") and not reacquire:
        return False
    rel = item.data.get("relative_path") or ""
    return posixpath.splitext(rel)[1].lower() in PROCESSABLE_EXTENSIONS


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
    if item.status == "deleting":
        return None
    payload = {"base_id": base.id, "item_id": item.id}
    queue = queue_of(base.id)
    if item.is_container:
        return rt.jobs.enqueue(
            conn,
            kinds.PREPARE_ROOT.name,
            payload,
            queue=queue,
            idempotency_key=kinds.prepare_key(base.id, item.id),
            parent_id=parent_job_id,
        )
    if needs_processing(base, item, reacquire=reacquire):
        if reacquire:
            payload["reacquire"] = True
        return rt.jobs.enqueue(
            conn,
            kinds.PROCESS_FILE.name,
            payload,
            queue=queue,
            idempotency_key=kinds.process_key(base.id, item.id),
            parent_id=parent_job_id,
        )
    if reacquire:
        payload["reacquire"] = True
    return rt.jobs.enqueue(
        conn,
        kinds.INDEX_DOCUMENTS.name,
        payload,
        queue=queue,
        idempotency_key=kinds.index_key(base.id, item.id, parent_job_id),
        parent_id=parent_job_id,
    )
