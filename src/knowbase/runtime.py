"""The shared handles every workflow and task handler needs, wired once by the facade
(:class:`~knowbase.service.Knowledge`)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from knowbase.catalog import bases as base_repo
from knowbase.catalog.db import Catalog
from knowbase.catalog.models import Base
from knowbase.catalog.schema import SEARCHABLE_STATUSES
from knowbase.diskspace import out_of_space
from knowbase.errors import (
    CatalogUnavailable,
    DatabaseCannotOpen,
    DatabaseIOError,
    DiskFull,
    NotFound,
    VectorStoreUnavailable,
)
from knowbase.files import BaseStorage
from knowbase.index import backends
from knowbase.index.base import IndexStore
from knowbase.locks import KeyedMutex, pg_advisory_lock
from knowbase.providers.base import EmbeddingProvider, RerankProvider
from knowbase.settings import Settings

if TYPE_CHECKING:
    from knowbase.jobs.manager import JobManager

log = logging.getLogger(__name__)


# A transient open error (see backends.is_transient) is retried after these pauses, ~1.5 s in all.
OPEN_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8)


def _serves(store: IndexStore, base: Base) -> bool:
    """Whether a cached store serves the base's current model (dims and model id)."""
    model = getattr(store, "model_id", base.embedding_model_id or "")
    return store.dims == base.dimensions and model == (base.embedding_model_id or "")


def queue_of(base_id: str) -> str:
    return f"base.{base_id}"


@dataclass
class Runtime:
    """Catalog, jobs, locks, stores and providers of one ``Knowledge`` instance."""

    settings: Settings
    catalog: Catalog
    mutex: KeyedMutex
    clock: Callable[[], float]
    #: Registers the job kinds' handlers (``operations.handlers.register_all``); the facade sets
    #: it, and it runs the first time a kind is looked up.
    register_kinds: Callable[[Runtime], None] | None = None
    _stores: dict[str, IndexStore] = field(default_factory=dict)
    _stores_lock: threading.Lock = field(default_factory=threading.Lock)
    _jobs: JobManager | None = None
    _jobs_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def jobs(self) -> JobManager:
        """The home's job manager, made on first use: a process that only reads a base never
        imports the queue engine (issue 39 item 5)."""
        if self._jobs is None:
            with self._jobs_lock:
                if self._jobs is None:
                    from knowbase.jobs.manager import JobManager

                    jobs = JobManager(
                        self.catalog, clock=self.clock, queue_concurrency=self.settings.workers
                    )
                    if self.register_kinds is not None:
                        jobs.registry.load_with(partial(self.register_kinds, self))
                    self._jobs = jobs
        return self._jobs

    @classmethod
    def open(cls, settings: Settings, *, clock: Callable[[], float] = time.time) -> Runtime:
        """The runtime of the home ``settings`` names: its folders made, its catalog opened
        and migrated, a job manager and the lock kind its catalog needs."""
        settings.home.mkdir(parents=True, exist_ok=True)
        settings.bases_dir.mkdir(parents=True, exist_ok=True)
        catalog = Catalog(settings.catalog_url)
        # A damaged catalog opens anyway: every catalog call raises the reason (the CLI prints
        # it, /status and the MCP tools say why), no worker starts, nothing is recreated.
        with contextlib.suppress(CatalogUnavailable):
            catalog.create_schema(bases_dir=settings.bases_dir)
        mutex = (
            KeyedMutex(settings.locks_dir)
            if catalog.is_sqlite
            else KeyedMutex(cross_process=pg_advisory_lock(catalog.engine))
        )
        return cls(settings=settings, catalog=catalog, mutex=mutex, clock=clock)

    # --- storage and index -------------------------------------------------------------------
    def storage(self, base_id: str) -> BaseStorage:
        return BaseStorage(self.settings.bases_dir, base_id)

    def lock(self, base_id: str):  # type: ignore[no-untyped-def]
        """The per-base exclusive section. Take it before opening a write transaction."""
        return self.mutex.hold(base_id)

    def _target(self, base: Base) -> backends.StoreTarget:
        return backends.StoreTarget(
            base.id,
            base.dimensions,
            self.storage(base.id).index_path,
            self.catalog.engine,
            self.settings.qdrant_url,
            self.settings.quantized_lane_min_rows,
            base.embedding_model_id,
            searchable_statuses=SEARCHABLE_STATUSES,
        )

    def store(self, base: Base, *, create: bool = False) -> IndexStore:
        """The base's index store, opened once per process through the backend registry.

        A store of other dims or another model (a model switch swapped it) is replaced; the
        old one closes when its last reader lets go
        (:mod:`knowbase.index.lease`). A transient open error is retried a few times
        (:data:`OPEN_RETRY_DELAYS`) before a failed mount fails the base; one on a full disk
        raises :class:`~knowbase.errors.DiskFull` at once and fails nothing.
        """
        with self._stores_lock:
            cached = self._stores.get(base.id)
            if cached is not None and _serves(cached, base):
                return cached
        backend = backends.get(base.index_backend)
        delays = iter(OPEN_RETRY_DELAYS)
        rechecked = False
        while True:
            try:
                store = backend.open(self._target(base), create)
                break
            except (VectorStoreUnavailable, DatabaseIOError, DatabaseCannotOpen) as exc:
                path = self.storage(base.id).index_path
                if out_of_space(path):
                    # SQLite says "disk I/O error" when it cannot create the -shm or -wal file
                    # of a full disk: that is no damage, and retrying cannot help.
                    raise DiskFull(
                        f"no space left on the device to open the index of base {base.id}"
                        f" ({exc.message})",
                        path=str(path),
                    ) from exc
                delay = next(delays, None) if backends.is_transient(exc) else None
                if delay is None:
                    damaged = isinstance(exc, VectorStoreUnavailable)  # not an I/O fault
                    if damaged and not create and backends.fails_base(exc):
                        if not rechecked and self._made_meanwhile(base, backend):
                            rechecked = True
                            continue  # a base being created or imported: its index is there now
                        self._mark_base_failed(base.id)
                    raise
                log.warning("opening the index of base %s: %s; retrying", base.id, exc)
                time.sleep(delay)
        with self._stores_lock:
            cached = self._stores.get(base.id)
            if cached is not None and _serves(cached, base):
                store.close()  # another thread opened it meanwhile: keep one
                return cached
            self._stores[base.id] = store
        if cached is not None:
            cached.close()  # deferred while a reader holds it
        return store

    @contextmanager
    def lease(self, base: Base) -> Iterator[IndexStore]:
        """The base's store, kept open for the whole body even if the base is updated."""
        while True:
            store = self.store(base)
            try:
                hold = store.hold()
                hold.__enter__()
            except VectorStoreUnavailable:
                # closed between lookup and hold (replaced by a newer store): look up again
                with self._stores_lock:
                    if self._stores.get(base.id) is store:
                        raise
                continue
            break
        try:
            yield store
        finally:
            hold.__exit__(None, None, None)

    def store_if_exists(self, base: Base) -> IndexStore | None:
        """The store when its index exists (cleanup on failed bases), else None."""
        if base.id in self._stores:
            return self._stores[base.id]
        if not backends.get(base.index_backend).exists(self._target(base)):
            return None
        try:
            return self.store(base)
        except VectorStoreUnavailable:
            return None

    def release_vanished_stores(self) -> list[str]:
        """Close the cached stores of bases no longer in the catalog (deleted by another
        process); returns their ids. A reader holding one keeps it until it lets go."""
        with self._stores_lock:
            cached = list(self._stores)
        if not cached:
            return []
        with self.catalog.read() as conn:
            present = {b.id for b in base_repo.list_all(conn)}
        gone = [base_id for base_id in cached if base_id not in present]
        for base_id in gone:
            self.close_store(base_id)
        return gone

    def close_store(self, base_id: str) -> None:
        """Drop the cached store; it closes once no reader holds it."""
        with self._stores_lock:
            store = self._stores.pop(base_id, None)
        if store is not None:
            store.close()

    def close(self) -> None:
        with self._stores_lock:
            stores = list(self._stores.values())
            self._stores.clear()
        for store in stores:
            store.close()

    def _made_meanwhile(self, base: Base, backend: backends.Backend) -> bool:
        """Whether the missing index exists once the base's lock is free. A base's creator
        (``create_base``, an import) holds that lock from before the row is visible until
        the index exists: a reader that met the row first waits here instead of failing a
        healthy base. False when this thread holds the lock itself (no one else can be
        making the index)."""
        hold = self.lock(base.id)
        try:
            hold.__enter__()
        except RuntimeError:  # the lock is not re-entrant: this thread already holds it
            return False
        try:
            return backend.exists(self._target(base))
        finally:
            hold.__exit__(None, None, None)

    def _mark_base_failed(self, base_id: str) -> None:
        try:
            with self.catalog.write_tx() as conn:
                base_repo.update(conn, base_id, status="failed", error="missing_vector_store")
        except NotFound:
            return  # deleted meanwhile (by another process): its index is gone on purpose
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
