"""``knowledge.process-file`` (ours): OCR or caption a file into ``<stem>.md``, then index it.

The processor runs in a child process that is killed on cancel or timeout (DESIGN.md "File
processing is our own job"). The artifact is written to a temp file first and moved into its
reserved slot under the base lock.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.engine import Connection

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Item
from knowbase.errors import UnreadableFile
from knowbase.files import artifact_path, reserve_relative_path
from knowbase.jobs.context import JobContext
from knowbase.operations.common import live_item
from knowbase.operations.indexing.snapshots import mark_origin_missing, reacquire_file
from knowbase.operations.kinds import INDEX_DOCUMENTS, PROCESS_FILE
from knowbase.runtime import Runtime

# OCR children at once in this process. The job threads are many (settings.workers) so index
# jobs can wait on the embedding batcher together; tesseract uses a core and ~100 MB per page.
OCR_SEATS = threading.BoundedSemaphore(max(2, os.cpu_count() or 2))


@contextmanager
def _ocr_seat(ctx: JobContext) -> Iterator[None]:
    """Hold one of :data:`OCR_SEATS`; a cancel or timeout ends the wait for one."""
    while not OCR_SEATS.acquire(timeout=0.2):
        ctx.check_cancelled()
    try:
        yield
    finally:
        OCR_SEATS.release()


def process_file(rt: Runtime, ctx: JobContext) -> None:
    found = live_item(rt, ctx.payload)
    if found is None:
        return
    base, item = found
    if ctx.payload.get("reacquire"):
        # A reindex re-copies the origin before OCR; the artifact of the old copy is stale.
        item, found_origin = reacquire_file(rt, base, item)
        mark_origin_missing(rt, item.id, not found_origin)
    from knowbase.pipeline.processing import get_processor

    processor = get_processor(base.file_processor_id, rt.settings)
    rel = item.relative_path
    if rel is None:
        raise UnreadableFile(f"item {item.id} has no raw copy", item_id=item.id)
    processed_rel = artifact_path(rel)
    if processor is not None and processor.available():
        ctx.progress("processing", 0, processor=processor.name)
        storage = rt.storage(base.id)
        storage.kb_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=storage.kb_dir) as tmp:
            out = Path(tmp) / "processed.md"
            with _ocr_seat(ctx):
                processor.process(
                    storage.path_of(rel),
                    out,
                    cancel=ctx.cancel_event,
                    timeout_s=PROCESS_FILE.timeout_s,
                )
            ctx.check_cancelled()
            with rt.lock(base.id), rt.catalog.write_tx() as conn:
                if not ctx.is_current_attempt():
                    return
                current = item_repo.find(conn, item.id)
                if current is None or current.status == "deleting":
                    return
                processed_rel = _free_artifact(conn, base.id, current, processed_rel)
                storage.copy_in(out, processed_rel, overwrite=storage.exists(processed_rel))
                current = item_repo.update_data(conn, item.id, indexed_relative_path=processed_rel)
                _enqueue_index(rt, ctx, conn, base.id, item.id)
        ctx.progress("done", 100)
        return
    # No processor installed: read the file as it is (images then fail no_text_extracted).
    with rt.catalog.write_tx() as conn:
        current = item_repo.find(conn, item.id)
        if current is not None and current.status != "deleting":
            _enqueue_index(rt, ctx, conn, base.id, item.id)


def _free_artifact(conn: Connection, base_id: str, item: Item, wanted: str) -> str:
    """Where the artifact goes: ``wanted`` (``<stem>.md``) unless another item's file holds that
    path, which happens when the file was added before the base had a processor (no slot was
    reserved then); the item's own earlier artifact path is reused."""
    own = item.data.get("indexed_relative_path")
    taken = item_repo.reserved_relative_paths(
        conn, base_id, processes=False, exclude_item_id=item.id
    )
    if own and own not in taken:
        return str(own)
    return wanted if wanted not in taken else reserve_relative_path(wanted, taken)


def _enqueue_index(
    rt: Runtime, ctx: JobContext, conn: Connection, base_id: str, item_id: str
) -> None:
    """Continue the chain: index the item, as a child of this job (in the caller's tx)."""
    rt.jobs.enqueuer.enqueue(
        conn,
        INDEX_DOCUMENTS.name,
        {"base_id": base_id, "item_id": item_id},
        queue=ctx.job.queue,
        parent_id=ctx.job.id,
    )
