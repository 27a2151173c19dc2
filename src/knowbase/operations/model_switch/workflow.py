"""Switching a base's embedding model by a shadow vector set (issue 15 item 4, DESIGN "Vectors
are keyed by model id").

A switch never re-reads a source or re-parses a file: it works from what the index stores.

1. :func:`start_switch` checks the request and enqueues one durable ``knowledge.switch-model``
   job (``operations/model_switch/handler.py``). An empty base swaps at once, without a job.
2. The job embeds, with the new model, every stored body that lacks a vector of it, and writes
   those vectors beside the old model's (:meth:`put_vectors`). When the new model's window is
   smaller than what the base was chunked for, the bodies are those of the stored units
   re-split under the new cap (:func:`rechunk_units`) — from the stored content, still no read.
   Searches keep using the old model's vectors all along.
3. Items indexed meanwhile get old-model vectors from their index job; the job's loop finds
   their bodies missing from the shadow set and embeds them too. When nothing is missing, it
   takes the base lock (no index write can land then), checks once more and :func:`swap`\\ s:
   re-chunked units (one index transaction), then the base's model, dims and chunking (one
   catalog transaction), then — a grace of :data:`SWAP_GRACE_S` later — the old set is
   dropped. An index job that embedded with the old model and writes after the swap is
   refused and retried (``operations/indexing/index_batch.py``).
4. A cancelled or failed switch drops its shadow set and leaves the old model serving; the
   job's status and error say why (:func:`switch_status`). A worker killed mid-switch leaves the
   job to lease recovery, which runs it again (``retry``): the shadow vectors already written
   are kept and the build resumes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.guards import assert_base_runnable, assert_subtrees_terminal
from knowbase.catalog.models import Base
from knowbase.catalog.schema import job as job_t
from knowbase.errors import Conflict, InvalidInput
from knowbase.index.base import MaterialInput, UnitRecord
from knowbase.jobs.model import Job
from knowbase.pipeline.documents import ChunkSettings
from knowbase.pipeline.indexing.chunking import chunk_settings_for_window
from knowbase.runtime import Runtime, queue_of
from knowbase.units.chunk import Chunk
from knowbase.units.context import unit_text
from knowbase.units.hashing import text_hash

log = logging.getLogger(__name__)

SWITCH_KIND = "knowledge.switch-model"


def switch_key(base_id: str) -> str:
    """The idempotency key of a base's switch: one switch per base at a time."""
    return f"knowledge:{base_id}:switch-model"


@dataclass(frozen=True)
class SwitchPlan:
    """What a switch builds: the target model and the chunking it serves with."""

    base_id: str
    from_model: str | None
    to_model: str
    dims: int
    chunk_size: int
    chunk_overlap: int
    token_cap: int | None  # the new model's window − 2 when it must re-chunk, else None
    rechunk: bool

    def payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> SwitchPlan:
        return cls(**{k: payload[k] for k in cls.__dataclass_fields__})


def _cap(chunk_size: int, window: int | None) -> int:
    return min(chunk_size, window - 2) if window else chunk_size


def plan_switch(
    base: Base, model_id: str, dims: int, window: int | None, old_window: int | None
) -> SwitchPlan:
    """The plan for ``base`` → ``model_id`` (pure). Re-chunk only when the new model reads
    fewer tokens than the base's chunks may hold; the base's chunking is kept otherwise."""
    size, overlap = base.chunk_size, base.chunk_overlap
    rechunk = _cap(size, window) < _cap(size, old_window)
    if rechunk:
        default_size, default_overlap = chunk_settings_for_window(window)
        size = min(size, default_size)
        overlap = min(overlap, default_overlap, size - 1)
    return SwitchPlan(
        base.id,
        base.embedding_model_id,
        model_id,
        dims,
        size,
        overlap,
        (window - 2) if rechunk and window else None,
        rechunk,
    )


def chunk_settings_of(plan: SwitchPlan, base: Base) -> ChunkSettings:
    return ChunkSettings(
        chunk_size=plan.chunk_size,
        chunk_overlap=plan.chunk_overlap,
        strategy=base.chunk_strategy,
        separator=base.chunk_separator,
        token_cap=plan.token_cap or plan.chunk_size,
    )


def rechunk_units(
    content: str,
    units: Sequence[UnitRecord],
    settings: ChunkSettings,
    count_tokens: Callable[[str], int | None] | None,
) -> list[Chunk]:
    """The stored units re-split under ``settings``' token cap (pure; no source read).

    Each unit is split on its own, so chunks still never span documents and keep their
    locators; a unit that fits stays as it is.

        >>> u = [UnitRecord("u0", 0, 0, 9, "a b c d e")]
        >>> [c.text for c in rechunk_units("a b c d e", u, ChunkSettings(2, 0, token_cap=2),
        ...                                lambda s: len(s.split()))]
        ['a b', 'c d', 'e']
    """
    from knowbase.pipeline.indexing.chunking import _cap as cap_for

    cap = cap_for(settings, count_tokens)
    chunks: list[Chunk] = []
    for u in sorted(units, key=lambda r: r.unit_index):
        spans = [(u.char_start, u.char_end)]
        if cap is not None:
            spans = cap(content, spans)
        for start, end in spans:
            chunks.append(Chunk(content[start:end], start, end, len(chunks), dict(u.locator)))
    return chunks


class ShadowChunks:
    """The re-chunked materials of a switch, recomputed only for materials whose content
    changed since the last look (the final check runs under the base lock)."""

    def __init__(self, settings: ChunkSettings, count_tokens: Callable[[str], int | None] | None):
        self.settings = settings
        self.count_tokens = count_tokens
        self._by_material: dict[str, tuple[str | None, MaterialInput]] = {}

    def refresh(self, store: Any) -> list[MaterialInput]:
        current = {m.material_id: m for m in store.models.stored_materials()}
        for mid in set(self._by_material) - set(current):
            del self._by_material[mid]
        for mid, m in current.items():
            cached = self._by_material.get(mid)
            if cached is not None and cached[0] == m.content_hash:
                continue
            content = store.content_text(mid) or ""
            chunks = rechunk_units(content, store.list_units(mid), self.settings, self.count_tokens)
            material = MaterialInput(mid, m.relative_path, content, chunks, m.title)
            self._by_material[mid] = (m.content_hash, material)
        return [material for _, material in self._by_material.values()]


def missing_bodies(store: Any, plan: SwitchPlan, shadow: ShadowChunks | None) -> dict[str, str]:
    """``{text_hash: text to embed}`` the new model still has to embed before the swap: the
    contextual unit text of re-chunked units and, for unchanged chunking, of the stored units
    the store says lack a vector (it answers with their bare bodies)."""
    if shadow is None:
        return _in_context(store, store.models.bodies_without_vectors(plan.to_model))
    bodies = {
        text_hash(c.text): unit_text(m.title, c.locator, c.text)  # what the model reads
        for m in shadow.refresh(store)
        for c in m.chunks
    }
    have = store.models.existing_vectors(plan.to_model, bodies)
    return {h: b for h, b in bodies.items() if h not in have}


def _in_context(store: Any, bodies: dict[str, str]) -> dict[str, str]:
    """``bodies`` with each body replaced by its unit's contextual text (the first unit of
    that body, in Concept ID and unit order), as an index job embeds it."""
    out = dict(bodies)
    todo = set(bodies)
    if not todo:
        return out
    for m in sorted(store.models.stored_materials(), key=lambda m: m.relative_path):
        for u in store.list_units(m.material_id):
            h = text_hash(u.text)
            if h in todo:
                out[h] = unit_text(m.title, u.locator, u.text)
                todo.discard(h)
        if not todo:
            break
    return out


# --- start ------------------------------------------------------------------------------------
def start_switch(rt: Runtime, base: Base, model_id: str) -> Job | None:
    """Enqueue the switch of ``base`` to ``model_id``; None when the base held no text and was
    swapped at once. Conflict while another switch of the base is in flight or an item is
    still being indexed; InvalidInput for the model the base already serves."""
    from knowbase.providers.registry import check_base_models, probe_model

    if model_id == base.embedding_model_id:
        raise InvalidInput(f"base {base.name!r} already uses {model_id}", base_id=base.id)
    check_base_models(rt.settings, embedding_model_id=model_id)
    active = current_switch(rt, base.id)
    if active is not None and not active.is_terminal:
        raise Conflict(
            f"base {base.name!r} is already switching to {active.payload.get('to_model')}",
            base_id=base.id,
            job_id=active.id,
        )
    with rt.catalog.read() as conn:
        roots = item_repo.list_items(conn, base.id, roots_only=True)
        if roots:
            assert_base_runnable(base, "switching the embedding model")
            assert_subtrees_terminal(conn, roots)
    dims, window = probe_model(rt.settings, model_id, None)
    old = rt.embedder(base)
    plan = plan_switch(base, model_id, dims, window, old.window if old is not None else None)
    if not roots:
        with rt.lock(base.id):
            swap(rt, plan, [])
        return None
    with rt.catalog.write_tx() as conn:
        return rt.jobs.enqueuer.enqueue(
            conn,
            SWITCH_KIND,
            plan.payload(),
            queue=queue_of(base.id),
            idempotency_key=switch_key(base.id),
        )


def current_switch(rt: Runtime, base_id: str) -> Job | None:
    """The base's latest switch job (active or ended), or None."""
    with rt.catalog.read() as conn:
        row = conn.execute(
            sa.select(job_t)
            .where(job_t.c.idempotency_key == switch_key(base_id))
            .order_by(job_t.c.created_at.desc(), job_t.c.id.desc())
            .limit(1)
        ).first()
    return Job.from_row(row) if row is not None else None


def switch_status(rt: Runtime, base_id: str) -> dict[str, Any] | None:
    """What the base's latest switch is doing or why it ended: job id and status, the models,
    progress (done / total bodies, measured rate, estimate), and the error of a failed or
    cancelled one."""
    job = current_switch(rt, base_id)
    if job is None:
        return None
    return {
        "job_id": job.id,
        "status": job.status,
        "from_model": job.payload.get("from_model"),
        "to_model": job.payload.get("to_model"),
        "rechunk": job.payload.get("rechunk"),
        "stage": job.progress_stage,
        "percent": job.progress_percent,
        "progress": job.progress_details,
        "error_code": job.error_code,
        "error_message": job.error_message,
    }


# --- swap -------------------------------------------------------------------------------------
def swap(rt: Runtime, plan: SwitchPlan, rechunked: Sequence[MaterialInput]) -> Base:
    """Make ``plan.to_model`` serve. The caller holds the base lock and has checked that every
    body has a new-model vector.

    Order: re-chunked units in one index transaction (covered by the new model's vectors, or
    nothing changes), then the base row in one catalog transaction. A crash between the two
    leaves the job to recovery, which swaps again. The old set goes later
    (:func:`drop_old_set`).
    """
    with rt.catalog.read() as conn:
        base = base_repo.get(conn, plan.base_id)
    store = rt.store(base)
    if rechunked:
        store.models.replace_units(rechunked, plan.to_model)
    with rt.catalog.write_tx() as conn:
        base = base_repo.update(
            conn,
            plan.base_id,
            embedding_model_id=plan.to_model,
            dimensions=plan.dims,
            chunk_size=plan.chunk_size,
            chunk_overlap=plan.chunk_overlap,
        )
    rt.store(base)  # the cached store of the old model is replaced
    log.info("base %s now serves %s (%s dims)", base.id, plan.to_model, plan.dims)
    return base


#: How long the old set outlives the swap: a search that resolved the base just before it may
#: still ask the old model's lane; it must find that lane whole, not empty.
SWAP_GRACE_S = 1.0


def drop_old_set(rt: Runtime, plan: SwitchPlan) -> None:
    """After the swap (and :data:`SWAP_GRACE_S`): drop the old model's vectors."""
    if not plan.from_model or plan.from_model == plan.to_model:
        return
    with rt.lock(plan.base_id):
        with rt.catalog.read() as conn:
            base = base_repo.find(conn, plan.base_id)
        if base is None or base.embedding_model_id != plan.to_model:
            return
        rt.store(base).models.drop_vectors(plan.from_model)


def drop_shadow(rt: Runtime, plan: SwitchPlan) -> None:
    """After a failed or cancelled switch: remove its shadow vectors (best effort)."""
    try:
        with rt.lock(plan.base_id):
            with rt.catalog.read() as conn:
                base = base_repo.find(conn, plan.base_id)
            if base is None or base.embedding_model_id == plan.to_model:
                return  # gone, or the swap happened: the set serves now
            store = rt.store_if_exists(base)
            if store is not None:
                store.models.drop_vectors(plan.to_model)
    except Exception:
        log.exception("could not drop the shadow vectors of base %s", plan.base_id)
