"""``knowledge.switch-model``: build the new model's vectors from stored chunks, then swap.

The rules are :mod:`.workflow`'s; this handler runs its loop: embed what
the shadow set lacks (outside the lock, a batch at a time, cancellable), store each batch under
the lock, and once nothing is missing re-check under the lock and swap. Progress carries the
bodies done and to do, the measured rate and the estimate left (bodies × measured rate).
No reader runs here: the bodies come from the index.
"""

from __future__ import annotations

import logging
import time

from knowbase.catalog import bases as base_repo
from knowbase.errors import Conflict
from knowbase.jobs.context import JobContext
from knowbase.jobs.model import Job
from knowbase.operations.model_switch.workflow import (
    SWAP_GRACE_S,
    ShadowChunks,
    SwitchPlan,
    chunk_settings_of,
    drop_old_set,
    drop_shadow,
    missing_bodies,
    swap,
)
from knowbase.runtime import Runtime

log = logging.getLogger(__name__)

BATCH = 32  # bodies per embed-and-store round: bounds what a cancel waits for, paces progress


def switch_model(rt: Runtime, ctx: JobContext) -> None:
    plan = SwitchPlan.from_payload(ctx.payload)
    with rt.catalog.read() as conn:
        base = base_repo.find(conn, plan.base_id)
    if base is None:
        return
    if base.embedding_model_id == plan.to_model:
        drop_old_set(rt, plan)  # a rerun after the swap committed (recovery)
        return
    if base.embedding_model_id != plan.from_model:
        raise Conflict(
            "the base's model changed since this switch was planned",
            base_id=base.id,
            expected=plan.from_model,
            found=base.embedding_model_id,
        )
    from knowbase.pipeline.indexing.embed import embed_unique
    from knowbase.providers.registry import get_embedding_provider

    provider = get_embedding_provider(plan.to_model, rt.settings)
    count = provider.count_tokens if provider.count_tokens("probe") is not None else None
    shadow = ShadowChunks(chunk_settings_of(plan, base), count) if plan.rechunk else None
    store = rt.store(base)
    done, started = 0, time.monotonic()
    ctx.progress("planning", 0, model=plan.to_model, rechunk=plan.rechunk)
    while True:
        todo = missing_bodies(store, plan, shadow)
        if not todo:
            with rt.lock(base.id):
                # Under the lock no index job can add a body: what is covered now stays so.
                todo = missing_bodies(store, plan, shadow)
                if not todo:
                    ctx.check_cancelled()
                    rechunked = shadow.refresh(store) if shadow is not None else []
                    swap(rt, plan, rechunked)
                    break
        # (the loop exits only through the swap above)
        total = done + len(todo)
        hashes = list(todo)
        for i in range(0, len(hashes), BATCH):
            ctx.check_cancelled()
            part = hashes[i : i + BATCH]
            vectors = embed_unique(
                {h: todo[h] for h in part},
                existing=lambda hs: store.models.existing_vectors(plan.to_model, hs),
                provider=provider,
                dims=plan.dims,
                check_cancelled=ctx.check_cancelled,
            )
            with rt.lock(base.id):
                store.models.put_vectors(plan.to_model, plan.dims, vectors)
            done += len(part)
            rate = done / max(1e-6, time.monotonic() - started)
            ctx.progress(
                "embedding",
                min(99.0, 100.0 * done / max(1, total)),
                done=done,
                total=total,
                rate_per_s=round(rate, 2),
                eta_s=round((total - done) / rate, 1) if rate > 0 else None,
                model=plan.to_model,
            )
    elapsed = time.monotonic() - started
    final = {
        "done": done,
        "total": done,
        "model": plan.to_model,
        "elapsed_s": round(elapsed, 2),
        "rate_per_s": round(done / elapsed, 2) if done and elapsed > 0 else None,
    }
    ctx.progress("swapped", 100, **final)
    time.sleep(SWAP_GRACE_S)
    drop_old_set(rt, plan)
    ctx.progress("done", 100, **final)


def make_switch_on_settled(rt: Runtime):  # type: ignore[no-untyped-def]
    """A failed or cancelled switch drops its shadow set; the old model keeps serving."""

    def on_settled(job: Job, status: str, error: BaseException | None) -> None:
        log.warning("model switch of base %s %s: %s", job.payload.get("base_id"), status, error)
        drop_shadow(rt, SwitchPlan.from_payload(job.payload))

    return on_settled
