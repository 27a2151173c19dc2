"""``Knowledge``: the facade every surface calls. Wiring and lifecycle only, no domain logic.

with Knowledge(load_settings()) as kb:
    base = kb.create_base("docs", embedding_model_id="local:all-minilm-l6-v2")
    kb.add(base.id, [AddInput.note("Paris is the capital of France.")], wait=True)
    for hit in kb.search(base.id, "capital of France").results:
        print(hit.rank, hit.concept_id, hit.text)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.db import Catalog
from knowbase.catalog.models import Base, Item
from knowbase.errors import InvalidInput, KnowbaseError, NotFound, Unavailable
from knowbase.ingestion.add import AddResult, Strategy, add_items
from knowbase.ingestion.delete import delete_items
from knowbase.ingestion.guards import assert_base_runnable
from knowbase.ingestion.inputs import AddInput
from knowbase.ingestion.recovery import SweepReport, sweep
from knowbase.ingestion.reindex import reindex_items
from knowbase.ingestion.restore import RestoreResult, restore_base
from knowbase.jobs.manager import JobManager
from knowbase.jobs.model import Job
from knowbase.locks import KeyedMutex, pg_advisory_lock
from knowbase.pipeline.indexing.chunking import chunk_settings_for_window
from knowbase.pipeline.store.base import UnitRecord
from knowbase.runtime import Runtime, queue_of
from knowbase.settings import Settings
from knowbase.tasks import register_all

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 15.0


class Knowledge:
    """One home's knowledge bases. Open it as a context manager; workers start on demand."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        start_workers: bool = False,
    ) -> None:
        self.settings = settings
        settings.home.mkdir(parents=True, exist_ok=True)
        settings.bases_dir.mkdir(parents=True, exist_ok=True)
        catalog = Catalog(settings.catalog_url)
        catalog.create_schema()
        self.rt = Runtime(
            settings=settings,
            catalog=catalog,
            jobs=JobManager(catalog, clock=clock),
            mutex=(
                KeyedMutex(settings.locks_dir)
                if catalog.is_sqlite
                else KeyedMutex(cross_process=pg_advisory_lock(catalog.engine))
            ),
            clock=clock,
        )
        register_all(self.rt)
        self._worker: Any = None
        self._concepts: Any = None
        # (item id, updated_at) → search display fields; a row's update makes a new key.
        self._visible_cache: dict[tuple[str, int], Any] = {}
        self._sweeper: threading.Thread | None = None
        self._stop_sweeper = threading.Event()
        if start_workers:
            self.start_workers()

    # --- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> Knowledge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.stop_workers()
        self.rt.close()
        self.rt.catalog.dispose()

    def start_workers(self, *, threads: int | None = None) -> None:
        """Run job workers in this process (and the periodic recovery sweep)."""
        if self._worker is not None:
            return
        from knowbase.jobs.worker import Worker

        self.recover()
        self._worker = Worker(self.rt.jobs, threads=threads or self.settings.workers)
        self._worker.start()
        self._stop_sweeper.clear()
        self._sweeper = threading.Thread(target=self._sweep_loop, name="kb-sweep", daemon=True)
        self._sweeper.start()

    def stop_workers(self, grace_s: float = 10) -> None:
        if self._worker is None:
            return
        self._stop_sweeper.set()
        self._worker.stop(grace_s=grace_s)
        self._worker = None

    def _sweep_loop(self) -> None:
        while not self._stop_sweeper.wait(SWEEP_INTERVAL_S):
            self.recover()

    def recover(self) -> SweepReport:
        """Recover interrupted jobs and items (also run at worker start)."""
        return sweep(self.rt)

    def run_until_idle(self, timeout_s: float = 600) -> None:
        """Process jobs in this process until nothing is claimable (tests, ``kb add``)."""
        started_here = self._worker is None
        if started_here:
            self.start_workers()
        try:
            self._worker.run_until_idle(timeout_s=timeout_s)
        finally:
            if started_here:
                self.stop_workers()

    # --- bases ---------------------------------------------------------------------------------
    def create_base(
        self,
        name: str,
        *,
        embedding_model_id: str | None = None,
        dimensions: int | None = None,
        **settings: Any,
    ) -> Base:
        """Create a base; without a model it is BM25-only. Learns dims from the provider."""
        if embedding_model_id:
            dimensions, window = self._probe_model(embedding_model_id, dimensions)
        else:
            dimensions, window = None, None
        size, overlap = chunk_settings_for_window(window)
        settings.setdefault("chunk_size", size)
        settings.setdefault("chunk_overlap", min(overlap, settings["chunk_size"] - 1))
        if "file_processor_id" not in settings:
            from knowbase.pipeline.processing import tesseract_available

            settings["file_processor_id"] = "tesseract" if tesseract_available() else None
        with self.rt.catalog.write_tx() as conn:
            base = base_repo.insert(
                conn,
                name=name,
                embedding_model_id=embedding_model_id,
                dimensions=dimensions,
                **settings,
            )
        try:
            with self.rt.lock(base.id):
                self.rt.storage(base.id).ensure()
                self.rt.store(base, create=True)
        except BaseException:
            self.rt.close_store(base.id)
            self.rt.storage(base.id).remove_all()
            with self.rt.catalog.write_tx() as conn:
                base_repo.delete(conn, base.id)
            raise
        return base

    def _probe_model(self, model_id: str, dims: int | None) -> tuple[int, int | None]:
        from knowbase.providers.registry import get_embedding_provider, probe_dims

        provider = get_embedding_provider(model_id, self.settings)
        probed = probe_dims(provider) if dims is None else dims
        return probed, provider.window

    def list_bases(self) -> list[Base]:
        with self.rt.catalog.read() as conn:
            return base_repo.list_all(conn)

    def get_base(self, name_or_id: str) -> Base:
        with self.rt.catalog.read() as conn:
            return base_repo.resolve(conn, name_or_id)

    def update_base(self, name_or_id: str, **patch: Any) -> Base:
        """Change settings (no reindex). Model changes go through ``enable_embedding_model``."""
        if {"embedding_model_id", "dimensions", "status", "error"} & set(patch):
            raise InvalidInput("use enable_embedding_model to set a base's embedding model")
        base = self.get_base(name_or_id)
        with self.rt.catalog.write_tx() as conn:
            return base_repo.update(conn, base.id, **patch)

    def delete_base(self, name_or_id: str) -> None:
        """Cancel the base's jobs, remove its directory, then its row (items cascade)."""
        base = self.get_base(name_or_id)
        active = self.rt.jobs.list_jobs(queue=queue_of(base.id), statuses=["pending", "running"])
        if active:
            self.rt.jobs.cancel_and_wait([j.id for j in active], timeout_s=30)
        with self.rt.lock(base.id):
            self.rt.close_store(base.id)
            self.rt.storage(base.id).remove_all()
            with self.rt.catalog.write_tx() as conn:
                base_repo.delete(conn, base.id)

    def restore_base(
        self, source: str, name: str, *, embedding_model_id: str | None = None
    ) -> RestoreResult:
        """A new base built from ``source``'s raw/ copies (the origin's restoreBase)."""
        return restore_base(
            self.rt,
            self.get_base(source).id,
            name,
            create_base=self.create_base,
            embedding_model_id=embedding_model_id,
        )

    def enable_embedding_model(self, name_or_id: str, model_id: str) -> Base:
        """BM25-only → hybrid: set the model (dims probed) and reindex everything from raw/."""
        base = self.get_base(name_or_id)
        if base.embedding_model_id:
            raise InvalidInput(
                f"base {base.name!r} already uses {base.embedding_model_id}", base_id=base.id
            )
        with self.rt.catalog.read() as conn:
            roots = item_repo.list_items(conn, base.id, roots_only=True)
            if roots:
                from knowbase.ingestion.guards import assert_subtrees_terminal

                assert_base_runnable(base, "enabling embeddings")
                assert_subtrees_terminal(conn, roots)
        dims, window = self._probe_model(model_id, None)
        size, overlap = chunk_settings_for_window(window)
        with self.rt.lock(base.id), self.rt.catalog.write_tx() as conn:
            base = base_repo.update(
                conn,
                base.id,
                embedding_model_id=model_id,
                dimensions=dims,
                chunk_size=size,
                chunk_overlap=overlap,
            )
        self.rt.close_store(base.id)
        self.rt.store(base)
        if roots:
            reindex_items(self.rt, base.id, [r.id for r in roots], reacquire=False)
        return base

    # --- items ---------------------------------------------------------------------------------
    def add(
        self,
        base: str,
        inputs: Iterable[AddInput],
        *,
        strategy: Strategy = "rename",
        wait: bool = False,
        timeout_s: float = 3600,
    ) -> AddResult:
        """Add items; with ``wait`` run workers here until their jobs are done."""
        result = add_items(self.rt, self.get_base(base).id, list(inputs), strategy)
        if wait and result.job_ids:
            self.wait(result.job_ids, timeout_s=timeout_s)
        return result

    def add_note(
        self, base: str, content: str, *, title: str | None = None, wait: bool = True
    ) -> Item:
        return self.add(base, [AddInput.note(content, title=title)], wait=wait).items[0]

    def wait(self, job_ids: Iterable[str], *, timeout_s: float = 3600) -> None:
        """Block until the jobs and every job they spawned are terminal (runs workers here)."""
        started_here = self._worker is None
        if started_here:
            self.start_workers()
        try:
            deadline = time.monotonic() + timeout_s
            roots = list(job_ids)
            while any(not j.is_terminal for j in self.job_tree(roots)):
                if time.monotonic() > deadline:
                    raise Unavailable(f"jobs still running after {timeout_s:.0f} s", jobs=roots)
                time.sleep(0.25)
        finally:
            if started_here:
                self.stop_workers()

    def job_tree(self, job_ids: Iterable[str]) -> list[Job]:
        """The jobs and all their descendants (parent links)."""
        return self.rt.jobs.tree(job_ids)

    def delete_items(self, base: str, item_ids: list[str], *, wait: bool = False) -> str | None:
        job_id = delete_items(self.rt, self.get_base(base).id, item_ids)
        if wait and job_id:
            self.wait([job_id])
        return job_id

    def reindex_items(
        self, base: str, item_ids: list[str], *, reacquire: bool = True, wait: bool = False
    ) -> str | None:
        job_id = reindex_items(self.rt, self.get_base(base).id, item_ids, reacquire=reacquire)
        if wait and job_id:
            self.wait([job_id])
        return job_id

    def retry_failed(self, base: str, *, wait: bool = False) -> str | None:
        """Re-run failed items: a reindex of the failed roots, rebuilt from raw/."""
        b = self.get_base(base)
        with self.rt.catalog.read() as conn:
            failed = item_repo.list_items(conn, b.id, statuses=["failed"])
        # A folder failed only because of its children retries just those children; a folder
        # that failed itself (e.g. interrupted expansion) is expanded again.
        ids = [i.id for i in failed if not i.is_container or i.error_code != "child_failed"]
        if not ids:
            return None
        return self.reindex_items(b.id, ids, reacquire=False, wait=wait)

    def list_items(
        self, base: str, *, statuses: Iterable[str] | None = None, roots_only: bool = False
    ) -> list[Item]:
        with self.rt.catalog.read() as conn:
            return item_repo.list_items(
                conn, self.get_base(base).id, statuses=statuses, roots_only=roots_only
            )

    def get_item(self, base: str, item_id: str) -> Item:
        b = self.get_base(base)
        with self.rt.catalog.read() as conn:
            item = item_repo.find(conn, item_id)
        if item is None or item.base_id != b.id or item.status == "deleting":
            raise NotFound(f"no knowledge item {item_id!r} in base {b.name!r}", item_id=item_id)
        return item

    def list_item_chunks(self, base: str, item_id: str) -> list[UnitRecord]:
        """Units of a completed item's leaves, in unit order (§7 "listItemChunks")."""
        b = self.get_base(base)
        assert_base_runnable(b, "listing chunks")
        item = self.get_item(b.id, item_id)
        if item.status != "completed":
            raise InvalidInput(f"item {item_id} is {item.status}, not completed", item_id=item_id)
        with self.rt.catalog.read() as conn:
            rows = item_repo.subtree(conn, [item.id])
        if any(r.status == "deleting" for r in rows):
            raise InvalidInput("part of this folder is being deleted", item_id=item_id)
        store = self.rt.store(b)
        return [u for r in rows if not r.is_container for u in store.list_units(r.id)]

    def counts(self, base: str) -> dict[str, int]:
        with self.rt.catalog.read() as conn:
            return item_repo.count_by_status(conn, self.get_base(base).id)

    # --- search --------------------------------------------------------------------------------
    def search(self, base: str | Base, query: str, *, top_k: int | None = None):  # type: ignore[no-untyped-def]
        """Hybrid (or BM25-only) search over one base's completed items (§7).

        ``base`` is a name, an id, or a ``Base`` the caller has just resolved (saves a lookup).
        """
        from knowbase.query.fusion import FusionSettings
        from knowbase.query.search import SearchConfig, search

        b = base if isinstance(base, Base) else self.get_base(base)
        assert_base_runnable(b, "searching")
        store = self.rt.store(b)
        config = SearchConfig(
            top_k=top_k or b.document_count,
            threshold=b.threshold,
            dims=b.dimensions,
            fusion=FusionSettings.of_base(b),
        )
        return search(
            store,
            query,
            config=config,
            embedder=self.rt.embedder(b),
            reranker=self.rt.reranker(b),
            visible=self.visible_items(b.id),
        )

    def visible_items(self, base_id: str):  # type: ignore[no-untyped-def]
        """A function: material ids → the completed items of this base among them."""
        from knowbase.query.search import VisibleItem

        cache = self._visible_cache

        def visible(material_ids: set[str]) -> dict[str, VisibleItem]:
            with self.rt.catalog.read() as conn:
                versions = item_repo.completed_versions(conn, base_id, material_ids)
                missing = [i for i, v in versions.items() if (i, v) not in cache]
                if missing:
                    if len(cache) > 50_000:
                        cache.clear()
                    for i in item_repo.find_completed(conn, base_id, missing).values():
                        cache[(i.id, i.updated_at)] = VisibleItem(i.id, i.type, i.title, i.source)
            found = {i: cache.get((i, v)) for i, v in versions.items()}
            return {i: item for i, item in found.items() if item is not None}

        return visible

    # --- concepts (query/concepts.py) ----------------------------------------------------------
    @property
    def concepts(self):  # type: ignore[no-untyped-def]
        """Concept ID read / grep / tree / delete / refresh (§8), as a ``ConceptService``."""
        from knowbase.query.concepts import ConceptService

        if self._concepts is None:
            self._concepts = ConceptService(self)
        return self._concepts

    # --- jobs ----------------------------------------------------------------------------------
    def list_jobs(
        self, *, base: str | None = None, statuses: Iterable[str] | None = None, limit: int = 200
    ) -> list[Job]:
        queue = queue_of(self.get_base(base).id) if base else None
        return self.rt.jobs.list_jobs(queue=queue, statuses=statuses, limit=limit)

    def get_job(self, job_id: str) -> Job:
        job = self.rt.jobs.get(job_id)
        if job is None:
            raise NotFound(f"no job {job_id!r}", job_id=job_id)
        return job


__all__ = ["AddInput", "Knowledge", "KnowbaseError"]
