"""``Knowledge``: the facade every surface calls. Wiring and lifecycle only, no domain logic.

with Knowledge(load_settings()) as kb:
    base = kb.create_base("docs", embedding_model_id="local:all-minilm-l6-v2")
    kb.add(base.id, [AddInput.note("Paris is the capital of France.")], wait=True)
    for hit in kb.search(base.id, "capital of France").results:
        print(hit.rank, hit.concept_id, hit.text)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.conflict_strategy import DEFAULT_STRATEGY, ConflictStrategy
from knowbase.errors import CatalogUnavailable, KnowbaseError
from knowbase.index.base import UnitRecord
from knowbase.runtime import Runtime
from knowbase.search import items as items_query
from knowbase.search.visibility import VisibilityCache
from knowbase.service.keys import KeysFacade
from knowbase.service.labels import LabelsFacade
from knowbase.service.searching import SearchFacade
from knowbase.settings import Settings

if TYPE_CHECKING:
    from knowbase.files.staging import Staging
    from knowbase.operations.add.cost import ImportCost
    from knowbase.operations.add.inputs import AddInput
    from knowbase.operations.add.workflow import AddResult
    from knowbase.operations.recovery import SweepReport
    from knowbase.operations.restore import RestoreResult
    from knowbase.operations.workers import WorkerHost
    from knowbase.portable.copy_home import CopyReport
    from knowbase.portable.transfer import ArchiveReport
    from knowbase.search.concepts import ConceptService
    from knowbase.service.activity import Activity

log = logging.getLogger(__name__)


def __getattr__(name: str) -> Any:
    """``AddInput`` on first use (PEP 562): it brings the ingestion room's sources, which a
    process that only reads a base never needs."""
    if name == "AddInput":
        from knowbase.operations.add.inputs import AddInput

        return AddInput
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register_kinds(rt: Runtime) -> None:
    """The job kinds' handlers, wired the first time a kind is looked up."""
    from knowbase.operations.handlers import register_all

    register_all(rt)


class Knowledge(SearchFacade, LabelsFacade, KeysFacade):
    """One home's knowledge bases. Open it as a context manager; workers start on demand."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        start_workers: bool = False,
    ) -> None:
        self.settings = settings
        self.rt = Runtime.open(settings, clock=clock)
        # Operations load when first used: a process that only reads a base (``kb search``)
        # imports no ingestion, job or processing room (issue 39 item 5; tests/test_service.py).
        self.rt.register_kinds = _register_kinds
        self._host: WorkerHost | None = None
        self._concepts: ConceptService | None = None
        self._visible = VisibilityCache(self.rt.catalog)
        self._activity: Activity | None = None
        if start_workers:
            self.start_workers()

    @property
    def activity(self) -> Activity:
        """Jobs, workers and the change feed of the home (``service/activity.py``)."""
        if self._activity is None:
            from knowbase.service.activity import Activity

            self._activity = Activity(self.rt)
        return self._activity

    @property
    def _workers(self) -> WorkerHost:
        if self._host is None:
            from knowbase.operations.workers import WorkerHost

            self._host = WorkerHost(self.rt, self.settings.workers)
        return self._host

    # --- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> Knowledge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._host is not None:
            self.stop_workers()
        self.rt.close()
        self.rt.catalog.dispose()

    def start_workers(self, *, threads: int | None = None) -> None:
        """Run job workers in this process (and the periodic recovery sweep)."""
        self._workers.start(threads=threads)

    def stop_workers(self, grace_s: float = 10) -> None:
        self._workers.stop(grace_s)

    def recover(self) -> SweepReport:
        """Recover interrupted jobs and items (also run at worker start)."""
        return self._workers.recover()

    def run_until_idle(self, timeout_s: float = 600) -> None:
        """Process jobs in this process until nothing is claimable (tests, ``kb add``)."""
        self._workers.run_until_idle(timeout_s)

    # --- bases (operations/bases.py) -----------------------------------------------------------
    def create_base(
        self,
        name: str,
        *,
        embedding_model_id: str | None = None,
        dimensions: int | None = None,
        **settings: Any,
    ) -> Base:
        """Create a base; without a model it is BM25-only. Learns dims from the provider."""
        from knowbase.operations import bases

        return bases.create_base(
            self.rt, name, embedding_model_id=embedding_model_id, dimensions=dimensions, **settings
        )

    @property
    def catalog_problem(self) -> CatalogUnavailable | None:
        """Why the catalog could not be opened (servers start anyway and say so), or None."""
        return self.rt.catalog.problem

    def check_catalog(self) -> None:
        """Raise CatalogUnavailable when the catalog cannot be used now (readiness)."""
        self.rt.catalog.check(self.settings.bases_dir)

    def list_bases(self) -> list[Base]:
        with self.rt.catalog.read() as conn:
            return base_repo.list_all(conn)

    def get_base(self, name_or_id: str) -> Base:
        with self.rt.catalog.read() as conn:
            return base_repo.resolve(conn, name_or_id)

    def update_base(self, name_or_id: str, **patch: Any) -> Base:
        """Change settings (no reindex). Model changes go through ``enable_embedding_model``."""
        from knowbase.operations import bases

        return bases.update_base(self.rt, self.get_base(name_or_id).id, **patch)

    def delete_base(self, name_or_id: str) -> None:
        """Cancel the base's jobs, remove its directory, then its row (items cascade)."""
        from knowbase.operations import bases

        bases.delete_base(self.rt, self.get_base(name_or_id).id)

    def restore_base(
        self, source: str, name: str, *, embedding_model_id: str | None = None
    ) -> RestoreResult:
        """A new base built from ``source``'s raw/ copies (the origin's restoreBase)."""
        from knowbase.operations.restore import restore_base

        return restore_base(
            self.rt, self.get_base(source).id, name, embedding_model_id=embedding_model_id
        )

    def enable_embedding_model(self, name_or_id: str, model_id: str) -> Base:
        """BM25-only → hybrid: a model switch from no model (``operations/model_switch/``)."""
        from knowbase.operations import bases

        return bases.enable_embedding_model(self.rt, self.get_base(name_or_id), model_id)

    # --- portable archives (portable/transfer.py, portable/copy_home.py) ---------------------
    def export_base(self, name_or_id: str, path: str | Path) -> ArchiveReport:
        """Write one base (settings, items, raw/ files, chunks, vectors) to one archive file."""
        from knowbase.portable.transfer import export_base

        return export_base(self.rt, self.get_base(name_or_id).id, Path(path))

    def import_base(
        self, path: str | Path, name: str | None = None, *, index_backend: str | None = None
    ) -> ArchiveReport:
        """A new base from an archive, verified first; nothing is re-embedded."""
        from knowbase.portable.transfer import import_base

        return import_base(self.rt, Path(path), name, index_backend=index_backend)

    def copy_home(self, database_url: str, home: str | Path) -> CopyReport:
        """Copy this home (every base, its jobs at rest) into the catalog at ``database_url``
        with raw/ files under ``home``, and verify it."""
        from knowbase.portable.copy_home import copy_home

        target = Knowledge(self.settings.with_(home=Path(home), database_url=database_url))
        try:
            return copy_home(self.rt, target.rt)
        finally:
            target.close()

    def set_embedding_model(self, name_or_id: str, model_id: str) -> dict[str, Any]:
        """Switch the base to ``model_id`` by a shadow vector set built from the stored chunks
        (no source re-read); the old model serves until the swap. Returns
        :meth:`model_switch` (None-free: an empty base swaps at once, ``status`` "swapped")."""
        from knowbase.operations.model_switch.workflow import start_switch, switch_status

        base = self.get_base(name_or_id)
        job = start_switch(self.rt, base, model_id)
        if job is None:
            return {"job_id": None, "status": "swapped", "to_model": model_id}
        return switch_status(self.rt, base.id) or {"job_id": job.id, "status": job.status}

    def model_switch(self, name_or_id: str) -> dict[str, Any] | None:
        """The base's latest model switch: status, progress and estimate, or why it ended."""
        from knowbase.operations.model_switch.workflow import switch_status

        return switch_status(self.rt, self.get_base(name_or_id).id)

    # --- items ---------------------------------------------------------------------------------
    def add(
        self,
        base: str,
        inputs: Iterable[AddInput],
        *,
        strategy: ConflictStrategy = DEFAULT_STRATEGY,
        wait: bool = False,
        timeout_s: float = 3600,
    ) -> AddResult:
        """Add items; with ``wait`` run workers here until their jobs are done.

        ``strategy`` says what happens to a source the base already holds; the default,
        ``update`` (:data:`knowbase.DEFAULT_STRATEGY`, the same on every surface), refreshes
        the item that holds it instead of adding a copy."""
        from knowbase.operations.add.workflow import add_items

        # The workflow resolves ``base`` itself: its row is read once per add (issue 38 item 5).
        result = add_items(self.rt, base, list(inputs), strategy)
        if wait and result.job_ids:
            self.wait(result.job_ids, timeout_s=timeout_s)
        return result

    def spool(self, base: str) -> Staging:
        """A private staging folder in the base for bytes a surface receives (uploads) before
        :meth:`add`; removed on exit, or by the recovery sweep after a crash."""
        from knowbase.files.staging import Staging

        return Staging(self.rt.storage(self.get_base(base).id))

    def add_note(
        self, base: str, content: str, *, title: str | None = None, wait: bool = True
    ) -> Item:
        from knowbase.operations.add.inputs import AddInput

        return self.add(base, [AddInput.note(content, title=title)], wait=wait).items[0]

    def wait(self, job_ids: Iterable[str], *, timeout_s: float = 3600) -> None:
        """Block until the jobs and every job they spawned are terminal (runs workers here)."""
        self._workers.wait(job_ids, timeout_s=timeout_s)

    def check_workers(self) -> None:
        """Raise ``DiskFull`` while this process's workers are paused on a full disk."""
        self._workers.check()

    def delete_items(self, base: str, item_ids: list[str], *, wait: bool = False) -> str | None:
        from knowbase.operations.delete.workflow import delete_items

        job_id = delete_items(self.rt, self.get_base(base).id, item_ids)
        if wait and job_id:
            self.wait([job_id])
        return job_id

    def delete_refs(self, base: str, refs: list[str]) -> dict[str, Any]:
        """Delete the items refs name, folders too (``operations/delete/workflow.py``)."""
        from knowbase.operations.delete.workflow import delete_refs

        return delete_refs(self.rt, self.get_base(base), refs)

    def reindex_items(
        self, base: str, item_ids: list[str], *, reacquire: bool = True, wait: bool = False
    ) -> str | None:
        from knowbase.operations.reindex.workflow import reindex_items

        job_id = reindex_items(self.rt, self.get_base(base).id, item_ids, reacquire=reacquire)
        if wait and job_id:
            self.wait([job_id])
        return job_id

    def sync(
        self,
        base: str,
        *,
        prune: bool | None = None,
        dry_run: bool = False,
        wait: bool = False,
        timeout_s: float = 3600,
    ) -> Any:
        """Bring the base up to date with its origins (``operations/sync/workflow.py``); returns a
        ``SyncReport``. ``prune`` None follows the base's ``sync_deletes``."""
        from knowbase.operations.sync.workflow import sync_base

        report = sync_base(self.rt, self.get_base(base).id, prune=prune, dry_run=dry_run)
        if wait and report.job_id:
            self.wait([report.job_id], timeout_s=timeout_s)
            job = self.activity.get_job(report.job_id)
            report.urls = dict(job.progress_details.get("pages") or {}) if job else {}
        return report

    def unfinished_before_sync(self, base: str) -> list[str]:
        """Jobs an interrupted sync or import of the base left to finish before a sync plans
        (``operations/sync/resume.py``); raises ``BaseBusy`` when another process runs them."""
        from knowbase.operations.sync.resume import unfinished_before_sync

        return unfinished_before_sync(self.rt, self.get_base(base).id)

    def retry_failed(self, base: str, *, wait: bool = False) -> str | None:
        """Re-run failed items: a reindex of the failed roots, rebuilt from raw/."""
        from knowbase.operations.reindex.workflow import retry_failed

        job_id = retry_failed(self.rt, self.get_base(base).id)
        if wait and job_id:
            self.wait([job_id])
        return job_id

    def retry_blockers(self, base: str, items: Iterable[Item]) -> dict[str, str]:
        """For failed items a retry cannot fix (an empty file, a page never fetched): why."""
        from knowbase.operations.reindex.workflow import retry_blocker

        self.get_base(base)
        found = {i.id: retry_blocker(self.rt, i) for i in items if i.status == "failed"}
        return {k: v for k, v in found.items() if v}

    def list_items(
        self, base: str, *, statuses: Iterable[str] | None = None, roots_only: bool = False
    ) -> list[Item]:
        with self.rt.catalog.read() as conn:
            return item_repo.list_items(
                conn, self.get_base(base).id, statuses=statuses, roots_only=roots_only
            )

    def subtree(self, base: str, root_ids: Iterable[str]) -> list[Item]:
        """The items and every descendant (a folder's files), roots first."""
        base_id = self.get_base(base).id
        with self.rt.catalog.read() as conn:
            return [i for i in item_repo.subtree(conn, root_ids) if i.base_id == base_id]

    def get_item(self, base: str, item_id: str) -> Item:
        return items_query.get_item(self.rt, self.get_base(base), item_id)

    def list_item_chunks(self, base: str, item_id: str) -> list[UnitRecord]:
        """Units of a completed item's leaves, in unit order (§7 "listItemChunks")."""
        return items_query.list_item_chunks(self.rt, self.get_base(base), item_id)

    def index_bytes(self, base: str) -> int | None:
        """Bytes of the base's SQLite index on disk (with WAL); None for an index kept
        elsewhere (PostgreSQL, Qdrant) or not built yet."""
        b = self.get_base(base)
        return self.rt.storage(b.id).index_bytes() if b.index_backend == "sqlite" else None

    def counts(self, base: str) -> dict[str, int]:
        """Files by status; a folder only when it failed on its own (one definition)."""
        with self.rt.catalog.read() as conn:
            return item_repo.count_files_by_status(conn, self.get_base(base).id)

    def model_hint(self, base: str | Base, paths: list[str]) -> str | None:
        """A hint to switch models when files at ``paths`` are mostly in scripts the base's
        model cannot read (``operations/add/model_hint.py``)."""
        from knowbase.operations.add.model_hint import model_hint_for

        b = base if isinstance(base, Base) else self.get_base(base)
        return model_hint_for(self.rt, b, paths)

    def import_cost(self, base: str | Base, paths: list[str]) -> ImportCost | None:
        """Chunks and minutes an import of ``paths`` will take to embed, at this machine's
        measured rate; None when it is short or the base is BM25-only
        (``operations/add/cost.py``)."""
        from knowbase.operations.add.cost import import_cost

        b = base if isinstance(base, Base) else self.get_base(base)
        return import_cost(self.rt, b, paths)


__all__ = ["AddInput", "Knowledge", "KnowbaseError"]
