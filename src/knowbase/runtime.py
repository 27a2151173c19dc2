"""The shared handles every workflow and task handler needs, wired once by ``service.py``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from knowbase.catalog import bases as base_repo
from knowbase.catalog.db import Catalog
from knowbase.catalog.models import Base
from knowbase.errors import VectorStoreUnavailable
from knowbase.jobs.manager import JobManager
from knowbase.locks import KeyedMutex
from knowbase.pipeline.store.sqlite import SqliteIndexStore
from knowbase.providers.base import EmbeddingProvider, RerankProvider
from knowbase.settings import Settings
from knowbase.storage import BaseStorage

log = logging.getLogger(__name__)


def queue_of(base_id: str) -> str:
    return f"base.{base_id}"


@dataclass
class Runtime:
    """Catalog, jobs, locks, stores and providers of one ``Knowledge`` instance."""

    settings: Settings
    catalog: Catalog
    jobs: JobManager
    mutex: KeyedMutex
    clock: Callable[[], float]
    _stores: dict[str, SqliteIndexStore] = field(default_factory=dict)
    _stores_lock: threading.Lock = field(default_factory=threading.Lock)

    # --- storage and index -------------------------------------------------------------------
    def storage(self, base_id: str) -> BaseStorage:
        return BaseStorage(self.settings.bases_dir, base_id)

    def lock(self, base_id: str):  # type: ignore[no-untyped-def]
        """The per-base exclusive section. Take it before opening a write transaction."""
        return self.mutex.hold(base_id)

    def store(self, base: Base, *, create: bool = False) -> SqliteIndexStore:
        """The base's index store, opened once per process. A failed mount fails the base."""
        with self._stores_lock:
            cached = self._stores.get(base.id)
            if cached is not None and cached.dims == base.dimensions:
                return cached
            if cached is not None:
                cached.close()
                del self._stores[base.id]
            storage = self.storage(base.id)
            try:
                store = SqliteIndexStore.open(
                    storage.index_path, base_id=base.id, dims=base.dimensions, create=create
                )
            except VectorStoreUnavailable:
                if not create:
                    self._mark_base_failed(base.id)
                raise
            self._stores[base.id] = store
            return store

    def store_if_exists(self, base: Base) -> SqliteIndexStore | None:
        """The store when its file exists (cleanup on failed bases), else None."""
        if base.id in self._stores:
            return self._stores[base.id]
        if not self.storage(base.id).index_path.exists():
            return None
        try:
            return self.store(base)
        except VectorStoreUnavailable:
            return None

    def close_store(self, base_id: str) -> None:
        with self._stores_lock:
            store = self._stores.pop(base_id, None)
        if store is not None:
            store.close()

    def close(self) -> None:
        with self._stores_lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()

    def _mark_base_failed(self, base_id: str) -> None:
        try:
            with self.catalog.write_tx() as conn:
                base_repo.update(conn, base_id, status="failed", error="missing_vector_store")
        except Exception:  # the mount error is what the caller needs to see
            log.exception("could not mark base %s failed", base_id)

    # --- providers ---------------------------------------------------------------------------
    def embedder(self, base: Base) -> EmbeddingProvider | None:
        if not base.embedding_model_id:
            return None
        from knowbase.providers.registry import get_embedding_provider

        return get_embedding_provider(base.embedding_model_id, self.settings)

    def reranker(self, base: Base) -> RerankProvider | None:
        if not base.rerank_model_id:
            return None
        from knowbase.providers.registry import get_rerank_provider

        return get_rerank_provider(base.rerank_model_id, self.settings)
