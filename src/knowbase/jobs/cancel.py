"""Cancelling jobs: pending ones at once, running ones through ``cancel_requested`` (their
worker sets the handler's event within a heartbeat, or at once when the attempt runs here).

The contexts of attempts running in this process are registered here (:meth:`Cancels.attach`)
so a local cancel reaches them without waiting for a heartbeat.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

import sqlalchemy as sa

from knowbase.catalog.db import Catalog, unindexed
from knowbase.catalog.schema import job as job_t
from knowbase.errors import Unavailable
from knowbase.jobs.context import JobContext
from knowbase.jobs.listing import JobQueries
from knowbase.jobs.model import Job
from knowbase.jobs.recovery import Leases, chunks
from knowbase.jobs.registry import JobRegistry
from knowbase.jobs.retry import JOB_CANCELLED

log = logging.getLogger("knowbase.jobs")


class Cancels:
    """Cancel requests and the waits on them; the live attempts of this process."""

    def __init__(
        self,
        catalog: Catalog,
        registry: JobRegistry,
        ms: Callable[[], int],
        *,
        queries: JobQueries,
        leases: Leases,
    ) -> None:
        self.catalog = catalog
        self.registry = registry
        self._ms = ms
        self.queries = queries
        self.leases = leases
        # Contexts of attempts running in this process: a local cancel reaches them at once.
        self._live: dict[str, JobContext] = {}
        self._live_lock = threading.Lock()

    def attach(self, ctx: JobContext) -> None:
        with self._live_lock:
            self._live[ctx.job.id] = ctx

    def detach(self, ctx: JobContext) -> None:
        with self._live_lock:
            if self._live.get(ctx.job.id) is ctx:
                del self._live[ctx.job.id]

    def request_cancel(self, job_ids: Iterable[str]) -> None:
        """Pending jobs become ``cancelled`` at once (``on_settled`` called); running ones get
        ``cancel_requested`` and their worker sets the handler's event within a heartbeat
        (at once when the attempt runs in this process). Terminal jobs are left alone."""
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return
        settled: list[Job] = []
        with self.catalog.write_tx() as conn:
            now = self._ms()  # stamped under the write lock: the change feed relies on it
            for chunk in chunks(ids):
                rows = conn.execute(
                    sa.update(job_t)
                    .where(job_t.c.id.in_(chunk), unindexed(job_t.c.status) == "pending")
                    .values(
                        status="cancelled",
                        active_key=None,
                        cancel_requested=True,
                        error_code=JOB_CANCELLED,
                        error_message="cancelled before it ran",
                        finished_at=now,
                        updated_at=now,
                    )
                    .returning(*job_t.c)
                ).all()
                settled.extend(Job.from_row(r) for r in rows)
                conn.execute(
                    sa.update(job_t)
                    .where(
                        job_t.c.id.in_(chunk),
                        unindexed(job_t.c.status) == "running",
                        job_t.c.cancel_requested == sa.false(),
                    )
                    .values(cancel_requested=True, updated_at=now)
                )
        with self._live_lock:
            for job_id in ids:
                ctx = self._live.get(job_id)
                if ctx is not None:
                    ctx.cancel_event.set()
        for job in settled:
            log.info("%s cancelled before it ran", job.call_string)
            self.registry.call_on_settled(job, "cancelled", None)

    def cancel_and_wait(self, job_ids: Iterable[str], *, timeout_s: float = 30) -> None:
        """Request the cancel and block until every job is terminal. Never call this while
        holding a base lock: the handler being cancelled may be waiting for that lock.
        Raises ``Unavailable`` on timeout."""
        ids = list(dict.fromkeys(job_ids))
        self.request_cancel(ids)
        deadline = time.monotonic() + timeout_s
        next_sweep = 0.0
        while True:
            jobs = self.queries.get_many(ids)
            waiting = [i for i, j in jobs.items() if not j.is_terminal]
            if not waiting:
                return
            if time.monotonic() >= deadline:
                raise Unavailable(
                    f"{len(waiting)} job(s) did not stop within {timeout_s:g} s",
                    hint="a worker may be stuck; try again later",
                    job_ids=waiting,
                )
            if time.monotonic() >= next_sweep:
                # A job of a dead worker would otherwise wait for its lease to lapse.
                self.leases.recover()
                next_sweep = time.monotonic() + 1.0
            time.sleep(0.05)

    def cancel_queue(self, queue: str, *, timeout_s: float = 30, page: int = 500) -> int:
        """Cancel **every** pending or running job of ``queue`` and wait until none is left,
        ``page`` jobs at a time; jobs their handlers enqueue meanwhile are cancelled too.
        Returns how many were cancelled. Raises ``Unavailable`` past ``timeout_s`` in all.
        Never call this while holding a base lock (see :meth:`cancel_and_wait`)."""
        deadline = time.monotonic() + timeout_s
        done = 0
        while ids := self.queries.active_job_ids(queue=queue, limit=page):
            left = deadline - time.monotonic()
            if left <= 0:  # handlers keep enqueueing faster than we cancel
                raise Unavailable(
                    f"jobs of {queue} still active after {timeout_s:g} s", queue=queue
                )
            self.cancel_and_wait(ids, timeout_s=left)
            done += len(ids)
        return done


__all__ = ["Cancels"]
