"""``knowledge.index-documents``: read → chunk → embed → rebuild the material (§5)."""

from __future__ import annotations

import logging
import threading

from sqlalchemy.engine import Connection

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.errors import EmbeddingModelChanged, InvalidInput, NoTextExtracted
from knowbase.index.base import MaterialInput
from knowbase.jobs.context import JobContext
from knowbase.operations.common import live_item
from knowbase.operations.indexing import group_commit
from knowbase.operations.indexing.snapshots import (
    ensure_snapshot,
    mark_origin_missing,
    reacquire_file,
)
from knowbase.pipeline.documents import ChunkSettings, Document
from knowbase.providers.base import EmbeddingProvider
from knowbase.runtime import Runtime

log = logging.getLogger(__name__)

# Reads through the reader pool at once. The pool keeps 2 warm children and starts a fresh
# interpreter for every read beyond them: with dozens of index jobs running (so the embedding
# batcher has texts to batch) that meant a child start per document. Waiting for a warm child
# costs a few milliseconds; a fresh one costs hundreds.
READ_SEATS = threading.BoundedSemaphore(2)


def chunk_settings(base: Base, embedder: EmbeddingProvider | None) -> ChunkSettings:
    """The base's chunking, with the model's window as the token cap where it is known."""
    cap = None
    if embedder is not None and embedder.window:
        cap = min(base.chunk_size, embedder.window - 2)
    return ChunkSettings(
        chunk_size=base.chunk_size,
        chunk_overlap=base.chunk_overlap,
        strategy=base.chunk_strategy,
        separator=base.chunk_separator,
        token_cap=cap,
    )


def read_item(rt: Runtime, base: Base, item: Item) -> list[Document]:
    """The item's documents: files via their reader (child process), snapshots as Markdown."""
    from knowbase.pipeline.readers import read_file_isolated, read_markdown_text
    from knowbase.pipeline.sources.okf import strip_okf_frontmatter

    rel = item.concept_id
    if not rel:
        raise InvalidInput(f"item {item.id} has no material yet", item_id=item.id)
    path = rt.storage(base.id).path_of(rel)
    if item.type == "file" and item.data.get("indexed_relative_path"):
        from knowbase.pipeline.processing import read_processed_markdown

        return read_processed_markdown(path.read_text(encoding="utf-8"))
    if item.type == "file":
        with READ_SEATS:
            return read_file_isolated(
                path,
                max_bytes=rt.settings.max_file_bytes,
                memory_mb=rt.settings.reader_memory_mb,
                as_text=bool(item.data.get("as_text")),
            )
    return read_markdown_text(strip_okf_frontmatter(path.read_text(encoding="utf-8")))


def index_documents(rt: Runtime, ctx: JobContext) -> None:
    """Index one leaf. Item status: reading → embedding → completed (failures via on_settled).

    Per document this costs no catalog transaction of its own beyond the job's claim: status
    writes and the final write are grouped with other index jobs' (:mod:`.group_commit`), the
    job completes inside that final write (:meth:`JobContext.complete_in`), progress is noted
    for the heartbeat, and the embedding goes through the provider's batcher.
    """
    found = live_item(rt, ctx.payload)
    if found is None:
        return
    base, item = found
    if item.is_container:
        raise InvalidInput(f"item {item.id} is a {item.type}, not a leaf")
    if item.status == "completed":
        return
    if not group_commit.set_status(rt, base.id, item.id, "reading"):
        return
    if ctx.payload.get("reacquire"):
        if item.type == "file":
            item, found_origin = reacquire_file(rt, base, item)
            mark_origin_missing(rt, item.id, not found_origin)
        else:
            item = ensure_snapshot(rt, base, item, refresh=True)
    item = ensure_snapshot(rt, base, item)
    if not item.concept_id and live_item(rt, ctx.payload) is None:
        return  # deleted while its snapshot was being captured
    documents = read_item(rt, base, item)
    ctx.check_cancelled()

    embedder = rt.embedder(base)
    from knowbase.pipeline.indexing.chunking import chunk_documents

    settings = chunk_settings(base, embedder)
    count = embedder.count_tokens if embedder is not None and settings.token_cap else None
    if count is not None and embedder is not None and embedder.count_tokens("probe") is None:
        count = None  # remote models: the estimate is all we have
    content, chunks = chunk_documents(documents, settings, count_tokens=count)
    if not chunks:
        raise NoTextExtracted(f"no text could be extracted from {item.title}", item_id=item.id)
    ctx.note_progress("embedding", 40, chunks=len(chunks))
    if not group_commit.set_status(rt, base.id, item.id, "embedding"):
        return
    store = rt.store(base)
    embeddings = {}
    if embedder is not None and base.dimensions:
        from knowbase.pipeline.indexing.batcher import batcher_for
        from knowbase.pipeline.indexing.context import chunk_text
        from knowbase.pipeline.indexing.embed import embed_missing

        def on_progress(done: int, total: int) -> None:
            ctx.note_progress(
                "embedding", 40 + 40 * done / max(1, total), embedded=done, total=total
            )

        embeddings = embed_missing(
            [c.text for c in chunks],
            existing=store.existing_embedding_hashes,
            provider=embedder,
            dims=base.dimensions,
            on_progress=on_progress,
            check_cancelled=ctx.check_cancelled,
            batcher=batcher_for(embedder),  # shares model calls with every other index job
            texts=[chunk_text(item.title, c) for c in chunks],  # title + heading path + slice
        )
    ctx.note_progress("saving", 80)

    def write(conn: Connection) -> None:
        current = item_repo.find(conn, item.id)
        if current is None or current.status == "deleting":
            return
        # The job completes in this transaction (no finish transaction of its own); that
        # UPDATE is also the fence: a newer attempt or a cancel owns the item now.
        if not ctx.complete_in(conn, chunks=len(chunks)):
            return
        serving = base_repo.find(conn, base.id)
        if serving is not None and serving.embedding_model_id != base.embedding_model_id:
            # A model switch swapped while this job embedded: its vectors are the old model's.
            raise EmbeddingModelChanged(
                "the base's embedding model changed while the item was embedding; retried",
                base_id=base.id,
                embedded_with=base.embedding_model_id,
                serving=serving.embedding_model_id,
            )
        store.rebuild_material(
            MaterialInput(item.id, current.concept_id or "", content, chunks, current.title),
            embeddings,
        )
        item_repo.set_status(conn, item.id, "completed", roll_up=False)

    # One lock and one transaction for many documents; their folder is rolled up once.
    group_commit.commit(rt, base.id, write, roll_up=item.group_id)
