"""Rules about bases: create (defaults, compensation), update, delete, enable embedding (§6).

Each function is one operation of the facade. A create that fails after its catalog row is
written removes the row and the directory again (compensation), so a half-made base is never
left behind; a delete cancels the base's jobs before it removes anything.
"""

from __future__ import annotations

import logging
from typing import Any

from knowbase.catalog import bases as base_repo
from knowbase.catalog.models import Base
from knowbase.errors import InvalidInput
from knowbase.ids import new_base_id
from knowbase.operations.changes import record_change
from knowbase.pipeline.indexing.chunking import chunk_settings_for_window
from knowbase.pipeline.processing import check_processor_id
from knowbase.providers.registry import check_base_models, probe_model
from knowbase.runtime import Runtime, queue_of

log = logging.getLogger(__name__)

# Settings only enable_embedding_model may change: they decide what the index holds.
MODEL_FIELDS = frozenset({"embedding_model_id", "dimensions", "status", "error"})
CANCEL_WAIT_S = 30


def base_defaults(window: int | None, settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with what the caller left out filled in: chunking from the model's window
    (overlap kept below the size), the file processor when tesseract is installed."""
    out = dict(settings)
    size, overlap = chunk_settings_for_window(window)
    out.setdefault("chunk_size", size)
    out.setdefault("chunk_overlap", min(overlap, out["chunk_size"] - 1))
    if "file_processor_id" not in out:
        from knowbase.pipeline.processing import default_processor_name

        out["file_processor_id"] = default_processor_name()
    return out


def create_base(
    rt: Runtime,
    name: str,
    *,
    embedding_model_id: str | None = None,
    dimensions: int | None = None,
    **settings: Any,
) -> Base:
    """Insert the base's row, then make its directory and index; undo the row if that fails."""
    check_base_models(
        rt.settings,
        embedding_model_id=embedding_model_id,
        dimensions=dimensions,
        rerank_model_id=settings.get("rerank_model_id"),
    )
    check_processor_id(settings.get("file_processor_id"), rt.settings)
    if embedding_model_id:
        dimensions, window = probe_model(rt.settings, embedding_model_id, dimensions)
    else:
        dimensions, window = None, None
    values = base_defaults(window, settings)
    if values.get("index_backend") is None and rt.settings.default_index_backend:
        values["index_backend"] = rt.settings.default_index_backend
    # The base's lock is held from before its row is visible until its index exists: a
    # reader that meets the row without the index waits on it instead of failing the base.
    base_id = new_base_id()
    with rt.lock(base_id):
        with rt.catalog.write_tx() as conn:
            base = base_repo.insert(
                conn,
                name=name,
                embedding_model_id=embedding_model_id,
                dimensions=dimensions,
                id=base_id,
                **values,
            )
        try:
            rt.storage(base.id).ensure()
            rt.store(base, create=True)
        except BaseException:
            _undo_create(rt, base.id)
            raise
    with rt.catalog.write_tx() as conn:  # recorded once the base exists whole
        record_change(conn, base, "create")
    return base


def _undo_create(rt: Runtime, base_id: str) -> None:
    """Compensate a failed create: the row always goes, so the name is free again, even when
    the directory that could not be made cannot be removed either (the caller sees the first
    error; a stray directory is only disk)."""
    try:
        rt.close_store(base_id)
        rt.storage(base_id).remove_all()
    except Exception:
        log.exception("could not remove the directory of the half-made base %s", base_id)
    finally:
        with rt.catalog.write_tx() as conn:
            base_repo.delete(conn, base_id)


def update_base(rt: Runtime, base_id: str, **patch: Any) -> Base:
    """Change settings (no reindex). Model changes go through :func:`enable_embedding_model`."""
    if MODEL_FIELDS & set(patch):
        raise InvalidInput("use enable_embedding_model to set a base's embedding model")
    check_base_models(rt.settings, rerank_model_id=patch.get("rerank_model_id"))
    check_processor_id(patch.get("file_processor_id"), rt.settings)
    with rt.catalog.write_tx() as conn:
        base = base_repo.update(conn, base_id, **patch)
        record_change(conn, base, "settings", patch)
        return base


def delete_base(rt: Runtime, base_id: str) -> None:
    """Cancel the base's jobs, remove its directory, then its row (items cascade)."""
    with rt.catalog.read() as conn:
        base = base_repo.find(conn, base_id)
    cancel_base_jobs(rt, base_id)
    with rt.lock(base_id):
        remove_base(rt, base_id)
    if base is not None:
        with rt.catalog.write_tx() as conn:
            record_change(conn, base, "delete")


def cancel_base_jobs(rt: Runtime, base_id: str) -> None:
    """Cancel the base's pending and running jobs and wait (bounded) until they stop."""
    rt.jobs.cancels.cancel_queue(
        queue_of(base_id), timeout_s=CANCEL_WAIT_S
    )  # all of them, in pages


def remove_base(rt: Runtime, base_id: str) -> None:
    """Close the store, delete the directory, then the row. The caller holds the lock if any
    worker could still touch the base."""
    rt.close_store(base_id)
    rt.storage(base_id).remove_all()
    with rt.catalog.write_tx() as conn:
        base_repo.delete(conn, base_id)


def enable_embedding_model(rt: Runtime, base: Base, model_id: str) -> Base:
    """BM25-only → hybrid: the model switch's special case (:mod:`.model_switch`).

    The new model's vectors are built from the stored chunks (no source re-read); the base
    serves the model once they are complete. An empty base gets it at once. Refused when the
    base already has a model (use :func:`~.model_switch.start_switch`), is failed, or any item
    is still in flight. Returns the base as it is now.
    """
    from knowbase.operations.model_switch.workflow import start_switch

    if base.embedding_model_id:
        raise InvalidInput(
            f"base {base.name!r} already uses {base.embedding_model_id}", base_id=base.id
        )
    start_switch(rt, base, model_id)
    with rt.catalog.read() as conn:
        return base_repo.get(conn, base.id)
