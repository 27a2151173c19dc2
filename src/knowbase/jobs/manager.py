"""The durable job manager: one object that composes the job collaborators of this package.

Jobs live in the catalog, so they survive the process and are shared by every process of a
home. ``enqueuer.enqueue`` joins the caller's transaction (:mod:`~knowbase.jobs.enqueue`);
``claims.claim`` hands pending jobs to a worker under a lease (:mod:`~knowbase.jobs.claims`);
the worker ends each attempt with ``attempts.finish`` (:mod:`~knowbase.jobs.attempts`), whose
UPDATE is conditional on ``locked_by`` + ``attempts`` so a stale attempt never overwrites a
newer state. ``leases.recover`` (:mod:`~knowbase.jobs.recovery`) returns orphaned running jobs
(lease lapsed, or the worker's pid is dead on this host) to their kind's recovery policy.
Pending jobs belong to the home and are never touched by recovery. Reads and retention are
:mod:`~knowbase.jobs.listing`, cancels :mod:`~knowbase.jobs.cancel`.

The manager builds them and holds them, one attribute each, and callers use them directly:
``jobs.enqueuer.enqueue(...)``, ``jobs.queries.get(...)``, ``jobs.cancels.request_cancel(...)``,
``jobs.claims.claim(...)``, ``jobs.attempts.finish(...)``, ``jobs.leases.recover()``,
``jobs.registry.registration(...)``. What it does itself: registering a kind's handlers.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from knowbase.catalog.db import Catalog
from knowbase.jobs.attempts import Attempts
from knowbase.jobs.cancel import Cancels
from knowbase.jobs.claims import GLOBAL_CONCURRENCY, QUEUE_CONCURRENCY, Claims
from knowbase.jobs.enqueue import Enqueuer, new_job_id
from knowbase.jobs.listing import JobQueries
from knowbase.jobs.liveness import make_worker_id
from knowbase.jobs.model import JobKind
from knowbase.jobs.recovery import Leases, RecoveryReport
from knowbase.jobs.registry import BatchHandler, Handler, JobRegistry, OnSettled, Registration
from knowbase.jobs.wakeups import JobWakeups


class JobManager:
    """Durable jobs on the catalog. Thread-safe; one instance per process is enough.

    ``clock`` (seconds, like :func:`time.time`) stamps every row and decides leases, backoff
    and attempt timeouts, so tests drive them with a fake clock. How long a call *blocks*
    (``wait_for``, ``cancel_and_wait``) is real time.
    """

    def __init__(
        self,
        catalog: Catalog,
        *,
        clock: Callable[[], float] = time.time,
        worker_id: str | None = None,
        lease_s: float = 30,
        heartbeat_s: float = 5,
        queue_concurrency: int = QUEUE_CONCURRENCY,
        global_concurrency: int = GLOBAL_CONCURRENCY,
        cancel_grace_s: float = 5,
    ) -> None:
        self.catalog = catalog
        self.clock = clock
        # Real wall clock: the start time is compared with the process start in /proc.
        self.worker_id = worker_id or make_worker_id()
        self.lease_s = lease_s
        self.heartbeat_s = heartbeat_s
        self.queue_concurrency = queue_concurrency
        self.global_concurrency = global_concurrency
        self.cancel_grace_s = cancel_grace_s
        #: Tells idle workers (every process on PostgreSQL) that a queue has work.
        self.wakeups = JobWakeups(catalog)
        self.registry = JobRegistry()
        ms = self._ms
        self.enqueuer = Enqueuer(catalog, self.registry, self.wakeups, ms)
        self.queries = JobQueries(catalog, clock, ms)
        self.leases = Leases(catalog, self.registry, self.wakeups, ms, lease_s=lease_s)
        self.claims = Claims(
            catalog,
            self.registry,
            ms,
            lease_s=lease_s,
            queue_concurrency=queue_concurrency,
            global_concurrency=global_concurrency,
        )
        self.attempts = Attempts(catalog, self.registry, self.wakeups, ms)
        self.cancels = Cancels(catalog, self.registry, ms, queries=self.queries, leases=self.leases)

    def _ms(self) -> int:
        return int(self.clock() * 1000)

    # --- registry ------------------------------------------------------------------------
    def register(
        self,
        kind: JobKind,
        handler: Handler | None,
        *,
        on_settled: OnSettled | None = None,
        batch_handler: BatchHandler | None = None,
        batch_max: int = 1,
        batch_concurrency: int = 4,
    ) -> None:
        """Run ``handler`` for jobs of ``kind``; ``on_settled(job, status, error)`` is called
        once a job of this kind ends ``failed`` or ``cancelled`` (never for completed).
        ``batch_handler``: one claim groups up to ``batch_max`` due jobs of the kind and queue
        and the worker runs them together through it (each job keeps its own attempt), at
        most ``batch_concurrency`` such batches at a time per worker; a kind with one runs
        every job through it, so its ``handler`` may be None."""
        self.registry.register(
            kind,
            handler,
            on_settled,
            batch_handler=batch_handler,
            batch_max=batch_max,
            batch_concurrency=batch_concurrency,
        )

    def kinds(self) -> list[str]:
        return sorted(self.registry.names())


__all__ = [
    "GLOBAL_CONCURRENCY",
    "QUEUE_CONCURRENCY",
    "Handler",
    "JobManager",
    "OnSettled",
    "RecoveryReport",
    "Registration",
    "new_job_id",
]
