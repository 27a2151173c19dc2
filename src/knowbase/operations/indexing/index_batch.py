"""``knowledge.index-documents`` for many items at once: the kind's one handler (DESIGN, turn 3).

One claim hands the worker up to :data:`BATCH_MAX` index jobs of one base
(:meth:`~knowbase.jobs.claims.Claims.claim_groups`); they run here together, in slices of at most
:data:`BATCH_BYTES` of source files: one catalog read for the items, one grouped status write
per step (``reading``, ``embedding``), the files read in one reader-child round trip, every
chunk text handed to the embedding batcher in one request, and the final writes in the base's
grouped transactions (one SAVEPOINT per item). What a document cost before — a claim, a status
transaction per step, a child round trip, a lock handoff — is now paid once per batch.

Every job keeps its own attempt, progress and outcome. The fences are per item: an item deleted,
cancelled or superseded meanwhile is skipped at write time (``ctx.complete_in`` is the attempt
fence); one item's error (an
unreadable file, no text, a failed write) is that item's, never its batch-mates'. A crash
leaves every job of the batch ``running`` under a dead owner: recovery puts each back to
pending on its own attempt count (``indexing_interrupted`` after the kind's last attempt).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.catalog.schema import ACTIVE_STATUSES
from knowbase.errors import EmbeddingModelChanged, InvalidInput, NoTextExtracted
from knowbase.index.base import MaterialInput
from knowbase.jobs.context import JobContext
from knowbase.jobs.model import Cancelled
from knowbase.jobs.retry import is_transient
from knowbase.operations.indexing import group_commit
from knowbase.operations.indexing import handler as documents
from knowbase.operations.indexing.handler import READ_SEATS, chunk_settings
from knowbase.operations.indexing.snapshots import (
    ensure_snapshot,
    mark_origin_missing,
    reacquire_file,
)
from knowbase.pipeline.documents import Document
from knowbase.runtime import Runtime

log = logging.getLogger(__name__)

BATCH_MAX = 64  # jobs per claim: the base's grouped write takes 64 per transaction
BATCH_BYTES = 16 * 2**20  # source bytes read and held at once; a bigger batch runs in slices
# chunks embedded before their files are written: a model batch or two, so the chunks done
# move every few seconds on a laptop CPU (MiniLM: ~20-60 chunks/s on two cores); a write
# of this many chunks costs a few ms against seconds of embedding
EMBED_RUN_CHUNKS = 64


@dataclass(eq=False)
class _Entry:
    """One job of the batch and how far its item got."""

    ctx: JobContext
    item: Item | None = None
    documents: list[Document] = field(default_factory=list)
    content: str = ""
    chunks: list[Any] = field(default_factory=list)
    path: Path | None = None  # its raw file, once looked up
    error: BaseException | None = None
    done: bool = False  # its outcome is decided (an error, or nothing left to do)

    def fail(self, exc: BaseException) -> None:
        self.error, self.done = exc, True


def index_batch(rt: Runtime, ctxs: list[JobContext]) -> dict[str, BaseException | None]:
    """Index the items of ``ctxs``' jobs together; each job's error (None: done)."""
    entries = [_Entry(ctx) for ctx in ctxs]
    by_base: dict[str, list[_Entry]] = {}
    for entry in entries:  # one queue is one base; grouped anyway, the payload decides
        by_base.setdefault(entry.ctx.payload["base_id"], []).append(entry)
    for base_id, group in by_base.items():
        base = _load(rt, base_id, group)
        if base is not None:
            for part in _slices(rt, base, group):
                _index_slice(rt, base, part)
    return {e.ctx.job_id: e.error for e in entries}


def _live(entries: list[_Entry]) -> list[_Entry]:
    return [e for e in entries if not e.done]


def _guard(entry: _Entry, step: Callable[[], None]) -> None:
    """Run one item's step; its error is that item's outcome."""
    try:
        step()
    except Exception as exc:  # noqa: BLE001 - this item's own outcome
        entry.fail(exc)


def _load(rt: Runtime, base_id: str, entries: list[_Entry]) -> Base | None:
    """The base and every item in one read; gone, ``deleting`` or finished items are done."""
    with rt.catalog.read() as conn:
        base = base_repo.find(conn, base_id)
        found = item_repo.find_many(conn, [e.ctx.payload["item_id"] for e in entries])
    for entry in entries:
        item = found.get(entry.ctx.payload["item_id"]) if base is not None else None
        entry.item = item
        if item is None or item.status in ("deleting", "completed"):
            entry.done = True  # nothing to do: the job completes as a no-op (as one job did)
        elif item.is_container:
            entry.fail(InvalidInput(f"item {item.id} is a {item.type}, not a leaf"))
    return base


def _slices(rt: Runtime, base: Base, entries: list[_Entry]) -> list[list[_Entry]]:
    """The live entries in runs of at most :data:`BATCH_BYTES` of raw files (one at least)."""
    storage = rt.storage(base.id)
    out: list[list[_Entry]] = []
    size = 0
    for entry in _live(entries):
        item = entry.item
        n = 0
        if item is not None and item.concept_id:
            try:
                entry.path = storage.path_of(item.concept_id)
                n = entry.path.stat().st_size
            except (OSError, ValueError):
                entry.path = None
        if not out or (size + n > BATCH_BYTES and out[-1]):
            out.append([])
            size = 0
        out[-1].append(entry)
        size += n
    return out


def _set_status(rt: Runtime, base_id: str, entries: list[_Entry], status: str) -> None:
    """One grouped statement moves every live item to ``status``; an item that did not move
    (deleted, or settled, meanwhile) is done: its job completes as a no-op."""
    live = _live(entries)
    if not live:
        return
    moved: set[str] = set()

    def write(conn: Connection) -> None:
        moved.clear()
        moved.update(item_repo.advance_many(conn, [e.ctx.payload["item_id"] for e in live], status))
        for entry in live:  # a retried item starts from failed: the full way, as one job did
            item = entry.item
            if (
                item is not None
                and item.id not in moved
                and item.status not in ACTIVE_STATUSES
                and item_repo.set_status(conn, item.id, status)
            ):
                moved.add(item.id)
                entry.item = replace(item, status=status)

    group_commit.commit(rt, base_id, write, lock=False)
    for entry in live:
        if entry.ctx.payload["item_id"] not in moved:
            entry.done = True


def _index_slice(rt: Runtime, base: Base, entries: list[_Entry]) -> None:
    _set_status(rt, base.id, entries, "reading")
    for entry in _live(entries):
        _guard(entry, lambda e=entry: _prepare(rt, base, e))
    _read(rt, base, _live(entries))
    embedder = rt.embedder(base)
    settings = chunk_settings(base, embedder)
    count = embedder.count_tokens if embedder is not None and settings.token_cap else None
    if count is not None and embedder is not None and embedder.count_tokens("probe") is None:
        count = None  # remote models: the estimate is all we have
    from knowbase.pipeline.indexing.chunking import chunk_documents

    for entry in _live(entries):

        def chunk(e: _Entry = entry) -> None:
            e.ctx.check_cancelled()
            e.content, e.chunks = chunk_documents(e.documents, settings, count_tokens=count)
            e.documents = []
            if not e.chunks:
                title = e.item.title if e.item else ""
                raise NoTextExtracted(
                    f"no text could be extracted from {title}", item_id=e.ctx.payload["item_id"]
                )
            e.ctx.note_progress("embedding", 40, chunks=len(e.chunks))

        _guard(entry, chunk)
    _set_status(rt, base.id, entries, "embedding")
    if embedder is None or not base.dimensions:
        _write(rt, base, _live(entries), {})
        return
    # Embedded and written in runs, the first file alone: an import shows its first file done
    # (and its chunk count moving) within seconds, not after the whole batch (issue 42).
    for run in _embed_runs(_live(entries)):
        embeddings = _embed(rt, base, _live(run)) if _live(run) else {}
        _write(rt, base, _live(run), embeddings)


def _embed_runs(entries: list[_Entry]) -> list[list[_Entry]]:
    """The first entry alone, then runs of at most :data:`EMBED_RUN_CHUNKS` chunks (one entry
    at least)."""
    out: list[list[_Entry]] = []
    size = 0
    for n, entry in enumerate(entries):
        if n <= 1 or size + len(entry.chunks) > EMBED_RUN_CHUNKS:
            out.append([])
            size = 0
        out[-1].append(entry)
        size += len(entry.chunks)
    return out


def _prepare(rt: Runtime, base: Base, entry: _Entry) -> None:
    """Snapshots and re-acquisition of each item before it is read."""
    entry.ctx.check_cancelled()
    item = entry.item
    assert item is not None
    if entry.ctx.payload.get("reacquire"):
        if item.type == "file":
            item, found_origin = reacquire_file(rt, base, item)
            mark_origin_missing(rt, item.id, not found_origin)
        else:
            item = ensure_snapshot(rt, base, item, refresh=True)
    entry.item = ensure_snapshot(rt, base, item)
    if not entry.item.concept_id:
        entry.done = True  # deleted while its snapshot was being captured


def read_files(
    rt: Runtime, base: Base, items: list[Item], *, paths: list[Path | None] | None = None
) -> list[list[Document] | Exception]:
    """Plain files' documents (or each one's error) in one reader-child round trip;
    ``paths``: the items' raw files where already looked up."""
    from knowbase.pipeline.readers import read_files_isolated

    storage = rt.storage(base.id)
    given = paths or [None] * len(items)
    paths = [
        p or storage.path_of(item.concept_id or "") for p, item in zip(given, items, strict=True)
    ]
    with READ_SEATS:
        return list(
            read_files_isolated(
                paths,
                max_bytes=rt.settings.max_file_bytes,
                memory_mb=rt.settings.reader_memory_mb,
                as_text=[bool(item.data.get("as_text")) for item in items],
            )
        )


def _read(rt: Runtime, base: Base, entries: list[_Entry]) -> None:
    """Plain files together (:func:`read_files`); processed and snapshot items one by one."""
    files = [
        e
        for e in entries
        if e.item and e.item.type == "file" and not e.item.data.get("indexed_relative_path")
    ]
    if files:
        items = [e.item for e in files if e.item]
        results = read_files(rt, base, items, paths=[e.path for e in files])
        for entry, result in zip(files, results, strict=True):
            if isinstance(result, Exception):
                entry.fail(result)
            else:
                entry.documents = result
    for entry in entries:
        if entry not in files and not entry.done and entry.item is not None:
            item = entry.item
            _guard(
                entry,
                lambda e=entry, i=item: setattr(e, "documents", documents.read_item(rt, base, i)),
            )


def _embed(rt: Runtime, base: Base, entries: list[_Entry]) -> dict:
    """Every chunk text of the batch in one batcher request. A failure is retried item by
    item, so only the item whose text the model refuses fails (a transient one fails all)."""
    from knowbase.pipeline.indexing.batcher import batcher_for
    from knowbase.pipeline.indexing.embed import embed_missing
    from knowbase.units.context import chunk_text

    embedder = rt.embedder(base)
    store = rt.store(base)
    assert embedder is not None and base.dimensions

    def embed(part: list[_Entry]) -> dict:
        def check_cancelled() -> None:  # the batch stops only once every item was cancelled
            if all(e.ctx.cancel_event.is_set() for e in part):
                raise Cancelled("every job of the batch was cancelled")

        bodies = [c.text for e in part for c in e.chunks]
        texts = [chunk_text(e.item.title if e.item else "", c) for e in part for c in e.chunks]
        for e in part:
            e.ctx.note_progress("embedding", 40, chunks=len(e.chunks))
        return embed_missing(
            bodies,
            existing=store.existing_embedding_hashes,
            provider=embedder,
            dims=base.dimensions or 0,
            on_progress=lambda done, total: _note_embedded(part, done, total),
            check_cancelled=check_cancelled,
            batcher=batcher_for(embedder),  # shares model calls with every other index job
            texts=texts,
        )

    try:
        return embed(entries)
    except Exception as exc:  # noqa: BLE001 - whose failure is it?
        if len(entries) == 1 or isinstance(exc, Cancelled) or is_transient(exc):
            for entry in entries:
                entry.fail(exc)
            return {}
    out: dict = {}
    for entry in entries:
        _guard(entry, lambda e=entry: out.update(embed([e])))
    return out


def _note_embedded(part: list[_Entry], done: int, total: int) -> None:
    """Each job's chunks embedded so far (``embedded`` in its progress details), the share
    ``done`` of ``total`` texts sent, in the part's order: one file of thousands of chunks shows
    them move while it is embedded (issue 42), not only once it is written. In memory: the
    heartbeat writes it, no catalog write per batch."""
    left = round(sum(len(e.chunks) for e in part) * done / max(total, 1))
    for e in part:
        n = min(left, len(e.chunks))
        left -= n
        e.ctx.note_progress(
            "embedding", 40 + 40 * n // max(len(e.chunks), 1), chunks=len(e.chunks), embedded=n
        )


def _write(rt: Runtime, base: Base, entries: list[_Entry], embeddings: dict) -> None:
    """Every item's final write (material + ``completed`` + its job's completion) in one
    grouped transaction under the base lock, each item in its own SAVEPOINT: one item's
    failure rolls back only its rows. The batch reads its rows once, not once per item."""
    if not entries:
        return
    store = rt.store(base)
    for entry in entries:
        entry.ctx.note_progress("saving", 80, chunks=len(entry.chunks), embedded=len(entry.chunks))

    def write_one(conn: Connection, entry: _Entry, current: Item | None) -> None:
        if current is None or current.status == "deleting":
            return
        # The job completes in this transaction; that UPDATE is also the fence: a newer
        # attempt or a cancel owns the item now.
        if not entry.ctx.complete_in(conn, chunks=len(entry.chunks)):
            return
        material = MaterialInput(
            current.id, current.concept_id or "", entry.content, entry.chunks, current.title
        )
        store.rebuild_material(material, embeddings)
        item_repo.mark_completed(conn, current.id)

    def write(conn: Connection) -> None:
        serving = base_repo.find(conn, base.id)
        if serving is not None and serving.embedding_model_id != base.embedding_model_id:
            # A model switch swapped while the batch embedded: its vectors are the old one's.
            changed = EmbeddingModelChanged(
                "the base's embedding model changed while the item was embedding; retried",
                base_id=base.id,
                embedded_with=base.embedding_model_id,
                serving=serving.embedding_model_id,
            )
            for entry in entries:
                entry.fail(changed)
            return
        current = item_repo.find_many(conn, [e.ctx.payload["item_id"] for e in entries])
        if rt.catalog.is_sqlite and store.writes_batches:
            _write_sqlite(conn, store, entries, current, embeddings)
            return
        for entry in entries:
            try:
                with conn.begin_nested():
                    write_one(conn, entry, current.get(entry.ctx.payload["item_id"]))
            except Exception as exc:  # noqa: BLE001 - this item's own outcome
                entry.fail(exc)

    groups = {e.item.group_id for e in entries if e.item is not None and e.item.group_id}
    error = group_commit.commit_each(rt, base.id, [(write, None)], roll_up=groups)[0]
    if error is not None:  # the transaction itself failed: no item of the batch was written
        for entry in entries:
            if not entry.done:
                entry.fail(error)


def _write_sqlite(
    conn: Connection, store: Any, entries: list[_Entry], current: dict[str, Item], embeddings: dict
) -> None:
    """The batch's final write on a SQLite catalog: the fences in one read, the materials in
    one index transaction (a SAVEPOINT each), then each owned job completes and its item is
    marked. ``BEGIN IMMEDIATE`` holds the catalog's write lock from the fence read to the
    commit, so no cancel or newer attempt can land in between: the read is as good a fence as
    the conditional UPDATE, and an item whose material failed has written nothing to roll back.
    (PostgreSQL keeps the UPDATE-first order, each item in its own SAVEPOINT.)"""
    manager, worker_id = entries[0].ctx.manager, entries[0].ctx.worker_id
    owned = manager.attempts.owned_ids(conn, [e.ctx.job for e in entries], worker_id)
    live: list[tuple[_Entry, Item]] = []
    for entry in entries:
        row = current.get(entry.ctx.payload["item_id"])
        if row is not None and row.status != "deleting" and entry.ctx.job_id in owned:
            live.append((entry, row))
    materials = [
        MaterialInput(row.id, row.concept_id or "", entry.content, entry.chunks, row.title)
        for entry, row in live
    ]
    outcomes = store.rebuild_materials(materials, embeddings) if materials else []
    written = []
    for (entry, row), error in zip(live, outcomes, strict=True):
        if error is not None:
            entry.fail(error)
        else:
            written.append((entry, row))
    # the jobs complete and the items are marked in one statement each
    JobContext.complete_all_in(conn, [(e.ctx, {"chunks": len(e.chunks)}) for e, _ in written])
    item_repo.mark_completed_many(conn, [row.id for _, row in written])


__all__ = ["BATCH_BYTES", "BATCH_MAX", "index_batch"]
