"""The durable job manager: one object that composes the job collaborators of this package.

Jobs live in the catalog, so they survive the process and are shared by every process of a
home. ``enqueue`` joins the caller's transaction (:mod:`~knowbase.jobs.enqueue`); ``claim``
hands pending jobs to a worker under a lease (:mod:`~knowbase.jobs.claims`); the worker ends
each attempt with :meth:`JobManager.finish` (:mod:`~knowbase.jobs.attempts`), whose UPDATE is
conditional on ``locked_by`` + ``attempts`` so a stale attempt never overwrites a newer state.
:meth:`JobManager.recover` (:mod:`~knowbase.jobs.recovery`) returns orphaned running jobs (lease
lapsed, or the worker's pid is dead on this host) to their kind's recovery policy. Pending jobs
belong to the home and are never touched by recovery. Reads and retention are
:mod:`~knowbase.jobs.listing`, cancels :mod:`~knowbase.jobs.cancel`.

The methods here delegate, one line each: callers keep one object and its signatures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog.db import Catalog
from knowbase.jobs.attempts import Attempts
from knowbase.jobs.cancel import Cancels
from knowbase.jobs.claims import GLOBAL_CONCURRENCY, QUEUE_CONCURRENCY, Claims
from knowbase.jobs.context import JobContext
from knowbase.jobs.enqueue import Enqueuer, new_job_id
from knowbase.jobs.listing import PAGE, JobQueries
from knowbase.jobs.liveness import make_worker_id
from knowbase.jobs.model import Job, JobKind
from knowbase.jobs.recovery import Leases, RecoveryReport
from knowbase.jobs.registry import BatchHandler, Handler, JobRegistry, OnSettled, Registration
from knowbase.jobs.retry import Decision
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

    def registration(self, kind: str) -> Registration:
        return self.registry.registration(kind)

    def kinds(self) -> list[str]:
        return sorted(self.registry.names())

    def call_on_settled(self, job: Job, status: str, error: BaseException | None) -> None:
        """See :meth:`JobRegistry.call_on_settled`."""
        self.registry.call_on_settled(job, status, error)

    # --- enqueue (enqueue.py) ------------------------------------------------------------
    def enqueue(
        self,
        conn: Connection,
        kind: str,
        payload: dict[str, Any],
        *,
        queue: str,
        idempotency_key: str | None = None,
        parent_id: str | None = None,
        delay_s: float = 0,
    ) -> Job:
        """See :meth:`Enqueuer.enqueue`."""
        return self.enqueuer.enqueue(
            conn,
            kind,
            payload,
            queue=queue,
            idempotency_key=idempotency_key,
            parent_id=parent_id,
            delay_s=delay_s,
        )

    def enqueue_many(
        self,
        conn: Connection,
        kind: str,
        jobs: Sequence[tuple[dict[str, Any], str | None]],
        *,
        queue: str,
        parent_id: str | None = None,
    ) -> None:
        """See :meth:`Enqueuer.enqueue_many`."""
        self.enqueuer.enqueue_many(conn, kind, jobs, queue=queue, parent_id=parent_id)

    def enqueue_now(self, kind: str, payload: dict[str, Any], **kw: Any) -> Job:
        """:meth:`enqueue` in a transaction of its own."""
        return self.enqueuer.enqueue_now(kind, payload, **kw)

    # --- reads and retention (listing.py) ------------------------------------------------
    def get(self, job_id: str) -> Job | None:
        return self.queries.get(job_id)

    def get_many(self, job_ids: Iterable[str]) -> dict[str, Job]:
        return self.queries.get_many(job_ids)

    def children(self, job_id: str) -> list[Job]:
        """See :meth:`JobQueries.children`."""
        return self.queries.children(job_id)

    def tree(self, job_ids: Iterable[str]) -> list[Job]:
        """See :meth:`JobQueries.tree`."""
        return self.queries.tree(job_ids)

    def tree_active(self, job_ids: Iterable[str]) -> int:
        """See :meth:`JobQueries.tree_active`."""
        return self.queries.tree_active(job_ids)

    def any_unfinished(self) -> bool:
        """See :meth:`JobQueries.any_unfinished`."""
        return self.queries.any_unfinished()

    def wait_for(
        self, job_ids: Iterable[str], *, timeout_s: float | None = None, poll_s: float = 0.1
    ) -> list[Job]:
        """See :meth:`JobQueries.wait_for`."""
        return self.queries.wait_for(job_ids, timeout_s=timeout_s, poll_s=poll_s)

    def list_jobs(
        self,
        *,
        queue: str | None = None,
        statuses: Iterable[str] | None = None,
        kind_prefix: str | None = None,
        limit: int = 1000,
        before: str | None = None,
        queues: Iterable[str] | None = None,
        by_key: str | None = None,
    ) -> list[Job]:
        """See :meth:`JobQueries.list_jobs`."""
        return self.queries.list_jobs(
            queue=queue,
            statuses=statuses,
            kind_prefix=kind_prefix,
            limit=limit,
            before=before,
            queues=queues,
            by_key=by_key,
        )

    def iter_jobs(
        self,
        *,
        queue: str | None = None,
        statuses: Iterable[str] | None = None,
        columns: Iterable[sa.Column[Any]] | None = None,
        page: int = PAGE,
    ) -> Iterator[Any]:
        """See :meth:`JobQueries.iter_jobs`."""
        return self.queries.iter_jobs(queue=queue, statuses=statuses, columns=columns, page=page)

    def count_jobs(self, *, queue: str | None = None, statuses: Iterable[str] | None = None) -> int:
        """See :meth:`JobQueries.count_jobs`."""
        return self.queries.count_jobs(queue=queue, statuses=statuses)

    def active_job_ids(self, *, queue: str | None = None, limit: int = PAGE) -> list[str]:
        """See :meth:`JobQueries.active_job_ids`."""
        return self.queries.active_job_ids(queue=queue, limit=limit)

    def recent_jobs(self, *, queue: str, limit: int) -> list[Job]:
        """See :meth:`JobQueries.recent_jobs`."""
        return self.queries.recent_jobs(queue=queue, limit=limit)

    def changed_jobs(
        self, *, queue: str, since_ms: int, after: tuple[int, str] | None = None, limit: int = PAGE
    ) -> list[Job]:
        """See :meth:`JobQueries.changed_jobs`."""
        return self.queries.changed_jobs(queue=queue, since_ms=since_ms, after=after, limit=limit)

    def prune_terminal(
        self, *, retention_s: float, min_interval_s: float = 0, page: int = PAGE
    ) -> int:
        """See :meth:`JobQueries.prune_terminal`."""
        return self.queries.prune_terminal(
            retention_s=retention_s, min_interval_s=min_interval_s, page=page
        )

    # --- cancel (cancel.py) --------------------------------------------------------------
    def request_cancel(self, job_ids: Iterable[str]) -> None:
        """See :meth:`Cancels.request_cancel`."""
        self.cancels.request_cancel(job_ids)

    def cancel_and_wait(self, job_ids: Iterable[str], *, timeout_s: float = 30) -> None:
        """See :meth:`Cancels.cancel_and_wait`."""
        self.cancels.cancel_and_wait(job_ids, timeout_s=timeout_s)

    def cancel_queue(self, queue: str, *, timeout_s: float = 30, page: int = 500) -> int:
        """See :meth:`Cancels.cancel_queue`."""
        return self.cancels.cancel_queue(queue, timeout_s=timeout_s, page=page)

    def attach(self, ctx: JobContext) -> None:
        self.cancels.attach(ctx)

    def detach(self, ctx: JobContext) -> None:
        self.cancels.detach(ctx)

    # --- claim and attempts (claims.py, attempts.py) -------------------------------------
    def claim(
        self, worker_id: str, *, queues: Iterable[str] | None = None, limit: int = 1
    ) -> list[Job]:
        """See :meth:`Claims.claim`."""
        return self.claims.claim(worker_id, queues=queues, limit=limit)

    def claim_groups(
        self,
        worker_id: str,
        *,
        queues: Iterable[str] | None = None,
        limit: int = 1,
        batch_room: Mapping[str, int] | None = None,
    ) -> list[list[Job]]:
        """See :meth:`Claims.claim_groups`."""
        return self.claims.claim_groups(
            worker_id, queues=queues, limit=limit, batch_room=batch_room
        )

    def owned_ids(self, conn: Connection, jobs: Sequence[Job], worker_id: str) -> set[str]:
        """See :meth:`Attempts.owned_ids`."""
        return self.attempts.owned_ids(conn, jobs, worker_id)

    def finish(
        self,
        job: Job,
        worker_id: str,
        decision: Decision,
        *,
        error: BaseException | None = None,
        progress: tuple[str, float | None, dict[str, Any]] | None = None,
    ) -> Job | None:
        """See :meth:`Attempts.finish`."""
        return self.attempts.finish(job, worker_id, decision, error=error, progress=progress)

    # --- workers, leases and recovery (recovery.py) --------------------------------------
    def register_worker(self, worker_id: str) -> None:
        self.leases.register_worker(worker_id)

    def unregister_worker(self, worker_id: str) -> None:
        self.leases.unregister_worker(worker_id)

    def heartbeat(self, worker_id: str, job_ids: Iterable[str]) -> tuple[set[str], set[str]]:
        """See :meth:`Leases.heartbeat`."""
        return self.leases.heartbeat(worker_id, job_ids)

    def release(self, job: Job, worker_id: str | None, reason: str) -> Job | None:
        """See :meth:`Leases.release`."""
        return self.leases.release(job, worker_id, reason)

    def recover(self) -> RecoveryReport:
        """See :meth:`Leases.recover`."""
        return self.leases.recover()


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
