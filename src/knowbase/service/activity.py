"""What is running and what changed in a home: jobs, live workers and the change feed.

``Knowledge.activity`` is one of these. The surfaces read it for ``kb jobs``, ``kb workers``,
``GET /jobs`` and the event stream (``interfaces/http/events.py``); it never starts work.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from knowbase.catalog import bases as base_repo
from knowbase.catalog import item_changes
from knowbase.catalog.feed import ChangeFeed
from knowbase.errors import NotFound
from knowbase.jobs.liveness import LiveWorker, list_live_workers
from knowbase.jobs.model import Job
from knowbase.operations.indexing.progress import ChunkProgress, chunk_progress
from knowbase.runtime import Runtime, queue_of


class Activity:
    """Jobs, workers and item/job changes of one home, read through its runtime."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def _queue(self, base: str | None) -> str | None:
        if base is None:
            return None
        with self.rt.catalog.read() as conn:
            return queue_of(base_repo.resolve(conn, base).id)

    # --- jobs ----------------------------------------------------------------------------------
    def list_jobs(
        self,
        *,
        base: str | None = None,
        statuses: Iterable[str] | None = None,
        limit: int = 200,
        before: str | None = None,
        by_key: str | None = None,
        base_ids: Iterable[str] | None = None,
    ) -> list[Job]:
        """Jobs newest first; ``before`` (the last job id of a page) reads the next page.
        ``by_key``: only the jobs that API key asked for; ``base_ids``: only these bases' jobs
        (what a scoped key may see)."""
        return self.rt.jobs.queries.list_jobs(
            queue=self._queue(base),
            statuses=statuses,
            limit=limit,
            before=before,
            by_key=by_key,
            queues=None if base_ids is None else [queue_of(b) for b in base_ids],
        )

    def base_changes(self, base: str, limit: int = 20) -> list[dict[str, Any]]:
        """The base's changes that start no job (created, settings, deleted), newest first,
        each with who asked (``by_key``, ``by_surface``)."""
        from knowbase.catalog import base_changes

        with self.rt.catalog.read() as conn:
            return base_changes.recent(conn, base_repo.resolve(conn, base).id, limit)

    def count_jobs(self, *, base: str | None = None, statuses: Iterable[str] | None = None) -> int:
        return self.rt.jobs.queries.count_jobs(queue=self._queue(base), statuses=statuses)

    def get_job(self, job_id: str) -> Job:
        job = self.rt.jobs.queries.get(job_id)
        if job is None:
            raise NotFound(f"no job {job_id!r}", job_id=job_id)
        return job

    def job_tree(self, job_ids: Iterable[str]) -> list[Job]:
        """The jobs and all their descendants (parent links)."""
        return self.rt.jobs.queries.tree(job_ids)

    def chunk_progress(self, job_ids: Iterable[str]) -> ChunkProgress:
        """Chunks of the index jobs under ``job_ids``: known so far, and embedded (done)."""
        return chunk_progress(self.rt.jobs.queries.tree(job_ids))

    def base_chunk_progress(self, base: str) -> ChunkProgress | None:
        """Chunks of the base's current run: every index job updated since the oldest job
        still pending or running was created. None when the base is idle."""
        queue = self._queue(base)
        assert queue is not None
        oldest = next(
            iter(
                self.rt.jobs.queries.iter_jobs(queue=queue, statuses=["pending", "running"], page=1)
            ),
            None,
        )
        if oldest is None:
            return None
        jobs: list[Job] = []
        after: tuple[int, str] | None = None
        while True:
            page = self.rt.jobs.queries.changed_jobs(
                queue=queue, since_ms=oldest.created_at, after=after
            )
            jobs.extend(page)
            if not page:
                return chunk_progress(jobs)
            after = (page[-1].updated_at, page[-1].id)

    def cancel_jobs(self, base: str) -> list[str]:
        """Ask every pending or running job of the base to stop (no wait); their ids."""
        from knowbase.catalog.schema import job as job_t

        rows = self.rt.jobs.queries.iter_jobs(
            queue=self._queue(base), statuses=["pending", "running"], columns=[job_t.c.id]
        )
        ids = [row.id for row in rows]
        for start in range(0, len(ids), 500):
            self.rt.jobs.cancels.request_cancel(ids[start : start + 500])
        return ids

    # --- workers -------------------------------------------------------------------------------
    def live_workers(self) -> list[str]:
        """Ids of the workers (any process on this catalog) whose heartbeat is fresh."""
        from knowbase.jobs.worker import live_workers

        return live_workers(self.rt.catalog)

    def list_workers(self) -> list[LiveWorker]:
        """Live workers of every process and host on this catalog: id, host, pid, heartbeat
        age and the jobs each holds."""
        return list_live_workers(self.rt.catalog, lease_s=self.rt.jobs.lease_s)

    # --- change feed (the event stream) --------------------------------------------------------
    @property
    def changes(self) -> ChangeFeed:
        """Wakes readers when items or jobs change, in this process or another."""
        return self.rt.catalog.feed

    def item_states(self, base_id: str, *, after_id: str | None = None) -> list[dict[str, Any]]:
        """A page of the base's items (progress fields only), by id after ``after_id``."""
        with self.rt.catalog.read() as conn:
            return item_changes.item_states(conn, base_id, after_id=after_id)

    def changed_item_states(
        self, base_id: str, *, since_ms: int, after: tuple[int, str] | None = None
    ) -> list[dict[str, Any]]:
        """A page of the base's items with ``updated_at >= since_ms``; ``after`` pages on."""
        with self.rt.catalog.read() as conn:
            return item_changes.changed_item_states(conn, base_id, since_ms=since_ms, after=after)

    def deleted_item_ids(self, base_id: str, *, since_ms: int) -> list[str]:
        with self.rt.catalog.read() as conn:
            return item_changes.deleted_item_ids(conn, base_id, since_ms=since_ms)

    def recent_jobs(self, base_id: str, *, limit: int) -> list[Job]:
        """The base's newest ``limit`` jobs and every active one, oldest first."""
        return self.rt.jobs.queries.recent_jobs(queue=queue_of(base_id), limit=limit)

    def changed_jobs(
        self, base_id: str, *, since_ms: int, after: tuple[int, str] | None = None
    ) -> list[Job]:
        """A page of the base's jobs with ``updated_at >= since_ms``; ``after`` pages on."""
        return self.rt.jobs.queries.changed_jobs(
            queue=queue_of(base_id), since_ms=since_ms, after=after
        )
