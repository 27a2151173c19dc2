"""The durable job manager: one method per statement on the ``job`` table.

Jobs live in the catalog, so they survive the process and are shared by every process of a
home. ``enqueue`` joins the caller's transaction; ``claim`` hands pending jobs to a worker under
a lease; the worker ends each attempt with :meth:`JobManager.finish`, whose UPDATE is
conditional on ``locked_by`` + ``attempts`` so a stale attempt never overwrites a newer state.
:meth:`JobManager.recover` returns orphaned running jobs (lease lapsed, or the worker's pid is
dead on this host) to their kind's recovery policy. Pending jobs belong to the home and are
never touched by recovery.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog.db import Catalog
from knowbase.catalog.schema import TERMINAL_JOB_STATUSES
from knowbase.catalog.schema import job as job_t
from knowbase.errors import InvalidInput, KnowbaseError, NotFound, Unavailable
from knowbase.ids import new_time_id
from knowbase.jobs.context import JobContext
from knowbase.jobs.listing import JobQueries
from knowbase.jobs.liveness import make_worker_id
from knowbase.jobs.model import Job, JobKind
from knowbase.jobs.recovery import LeaseOps, RecoveryReport, chunks
from knowbase.jobs.retry import JOB_CANCELLED, Decision
from knowbase.jobs.wakeups import JobWakeups

log = logging.getLogger("knowbase.jobs")

Handler = Callable[[JobContext], None]
OnSettled = Callable[[Job, str, BaseException | None], None]

#: Spec §5: at most 5 running jobs per queue, 50 in all.
QUEUE_CONCURRENCY = 5
GLOBAL_CONCURRENCY = 50
CLAIM_PAGE = 256  # pending jobs a claim reads at a time, in claim order


def new_job_id() -> str:
    """A uuid7, monotonic in this process: ids sort by creation like the rows they name."""
    return new_time_id()


@dataclass(frozen=True)
class Registration:
    kind: JobKind
    handler: Handler
    on_settled: OnSettled | None


# The attempt still owns the row: one clause, its values bound per call (:func:`_owned`), and
# built once into the ownership check every index job asks before its final write.
_OWNED = sa.and_(
    job_t.c.id == sa.bindparam("job_id"),
    job_t.c.status == "running",
    job_t.c.locked_by == sa.bindparam("worker_id"),
    job_t.c.attempts == sa.bindparam("attempt_no"),  # not "attempts": a column
)
_OWNS = sa.select(job_t.c.id).where(_OWNED)


# A running attempt completes (JobContext.complete_in: once per indexed document, in the
# document's own final transaction), built once like the ownership check.
_COMPLETE = (
    sa.update(job_t)
    .where(_OWNED)
    .values(
        status="completed",
        error_code=None,
        error_message=None,
        lease_until=None,
        active_key=None,
        progress_stage=sa.bindparam("stage"),
        progress_percent=100.0,
        progress_details=sa.bindparam("details"),
        updated_at=sa.bindparam("now"),
        finished_at=sa.bindparam("now"),
    )
)


def _owner_args(job: Job, worker_id: str) -> dict[str, Any]:
    return {"job_id": job.id, "worker_id": worker_id, "attempt_no": job.attempts}


def _owned(job: Job, worker_id: str) -> Any:
    """WHERE clause: this attempt still owns the row."""
    return _OWNED.params(_owner_args(job, worker_id))


class JobManager(LeaseOps, JobQueries):
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
        self._registry: dict[str, Registration] = {}
        # Contexts of attempts running in this process: a local cancel reaches them at once.
        self._live: dict[str, JobContext] = {}
        self._live_lock = threading.Lock()
        self._prune_lock = threading.Lock()
        self._last_prune = float("-inf")
        #: Tells idle workers (every process on PostgreSQL) that a queue has work.
        self.wakeups = JobWakeups(catalog)

    # --- registry ------------------------------------------------------------------------
    def register(
        self, kind: JobKind, handler: Handler, *, on_settled: OnSettled | None = None
    ) -> None:
        """Run ``handler`` for jobs of ``kind``; ``on_settled(job, status, error)`` is called
        once a job of this kind ends ``failed`` or ``cancelled`` (never for completed)."""
        self._registry[kind.name] = Registration(kind, handler, on_settled)

    def registration(self, kind: str) -> Registration:
        try:
            return self._registry[kind]
        except KeyError:
            raise KnowbaseError(
                f"job kind {kind!r} is not registered with this JobManager", kind=kind
            ) from None

    def kinds(self) -> list[str]:
        return sorted(self._registry)

    def _ms(self) -> int:
        return int(self.clock() * 1000)

    # --- enqueue -------------------------------------------------------------------------
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
        """Add a job inside the caller's transaction (``conn`` from ``catalog.write_tx()``):
        it exists only if that transaction commits. When a non-terminal job holds the same
        ``idempotency_key``, that job is returned and nothing is inserted; terminal jobs never
        block a new one."""
        values = self._new_row(kind, payload, queue, idempotency_key, parent_id, delay_s)
        if idempotency_key is None:
            row = conn.execute(sa.insert(job_t).values(values).returning(*job_t.c)).one()
            return self._enqueued(conn, Job.from_row(row), delay_s)
        for _ in range(3):
            row = conn.execute(self._insert_unless_active(conn, values)).first()
            if row is not None:
                return self._enqueued(conn, Job.from_row(row), delay_s)
            existing = conn.execute(
                sa.select(job_t).where(job_t.c.active_key == idempotency_key)
            ).first()
            if existing is not None:
                return Job.from_row(existing)
            # PostgreSQL READ COMMITTED: the holder went terminal between the two statements.
        raise Unavailable("could not enqueue: idempotency key kept changing", key=idempotency_key)

    def enqueue_many(
        self,
        conn: Connection,
        kind: str,
        jobs: Sequence[tuple[dict[str, Any], str | None]],
        *,
        queue: str,
        parent_id: str | None = None,
    ) -> None:
        """:meth:`enqueue` for many jobs of one kind, ``(payload, idempotency_key)`` each, in
        one multi-row INSERT (a folder's files). A key a non-terminal job holds skips its row,
        as :meth:`enqueue` would return that job instead."""
        rows = [self._new_row(kind, payload, queue, key, parent_id, 0) for payload, key in jobs]
        if not rows:
            return
        conn.execute(self._insert_unless_active(conn, None), rows)
        self.wakeups.notify(conn, queue)

    def _new_row(
        self,
        kind: str,
        payload: dict[str, Any],
        queue: str,
        idempotency_key: str | None,
        parent_id: str | None,
        delay_s: float,
    ) -> dict[str, Any]:
        reg = self.registration(kind)
        if not isinstance(payload, dict):
            raise InvalidInput("job payload must be a JSON object", kind=kind)
        try:
            payload_text = json.dumps(payload, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"job payload is not JSON: {exc}", kind=kind) from exc
        now = self._ms()
        return {
            "id": new_job_id(),
            "kind": kind,
            "queue": queue,
            "payload": payload_text,
            "status": "pending",
            "idempotency_key": idempotency_key,
            "active_key": idempotency_key,
            "parent_id": parent_id,
            "attempts": 0,
            "max_attempts": reg.kind.max_attempts,
            "run_at": now + max(0, int(delay_s * 1000)),
            "cancel_requested": False,
            "created_at": now,
            "updated_at": now,
        }

    def _enqueued(self, conn: Connection, job: Job, delay_s: float) -> Job:
        if delay_s <= 0:  # a deferred job is found by the poll once due
            self.wakeups.notify(conn, job.queue)
        return job

    @staticmethod
    def _insert_unless_active(conn: Connection, values: dict[str, Any] | None) -> Any:
        """INSERT … ON CONFLICT (active_key) DO NOTHING RETURNING *: a collision returns no
        row instead of aborting the caller's transaction (the origin aborted it). ``values``
        None: the bare statement, without RETURNING, for a list of rows (executemany)."""
        name = conn.dialect.name
        if name == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        elif name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:  # pragma: no cover - only SQLite and PostgreSQL are supported
            raise KnowbaseError(f"unsupported catalog dialect {name!r}")
        if values is None:
            return insert(job_t).on_conflict_do_nothing(index_elements=["active_key"])
        return (
            insert(job_t)
            .values(values)
            .on_conflict_do_nothing(index_elements=["active_key"])
            .returning(*job_t.c)
        )

    def enqueue_now(self, kind: str, payload: dict[str, Any], **kw: Any) -> Job:
        """:meth:`enqueue` in a transaction of its own."""
        with self.catalog.write_tx() as conn:
            return self.enqueue(conn, kind, payload, **kw)

    # --- reads ---------------------------------------------------------------------------
    def get(self, job_id: str) -> Job | None:
        with self.catalog.read() as conn:
            row = conn.execute(sa.select(job_t).where(job_t.c.id == job_id)).first()
        return None if row is None else Job.from_row(row)

    def get_many(self, job_ids: Iterable[str]) -> dict[str, Job]:
        ids = list(dict.fromkeys(job_ids))
        out: dict[str, Job] = {}
        with self.catalog.read() as conn:
            for chunk in chunks(ids):
                for row in conn.execute(sa.select(job_t).where(job_t.c.id.in_(chunk))):
                    out[row.id] = Job.from_row(row)
        return out

    def children(self, job_id: str) -> list[Job]:
        """Jobs enqueued with ``parent_id=job_id``, in creation order."""
        q = sa.select(job_t).where(job_t.c.parent_id == job_id)
        with self.catalog.read() as conn:
            rows = conn.execute(q.order_by(job_t.c.created_at, job_t.c.id)).all()
        return [Job.from_row(r) for r in rows]

    def tree(self, job_ids: Iterable[str]) -> list[Job]:
        """The jobs and all their descendants by ``parent_id`` (one recursive query)."""
        roots = list(dict.fromkeys(job_ids))
        if not roots:
            return []
        tree = sa.select(job_t.c.id).where(job_t.c.id.in_(roots)).cte("tree", recursive=True)
        tree = tree.union_all(sa.select(job_t.c.id).where(job_t.c.parent_id == tree.c.id))
        q = sa.select(job_t).where(job_t.c.id.in_(sa.select(tree.c.id)))
        with self.catalog.read() as conn:
            rows = conn.execute(q.order_by(job_t.c.created_at, job_t.c.id)).all()
        return [Job.from_row(r) for r in rows]

    def tree_active(self, job_ids: Iterable[str]) -> int:
        """How many of the jobs and their descendants are not terminal: one aggregate query, so
        a waiter polling a 100k-job import reads a number, not 100k rows."""
        roots = list(dict.fromkeys(job_ids))
        if not roots:
            return 0
        tree = sa.select(job_t.c.id).where(job_t.c.id.in_(roots)).cte("tree", recursive=True)
        tree = tree.union_all(sa.select(job_t.c.id).where(job_t.c.parent_id == tree.c.id))
        q = sa.select(sa.func.count()).where(
            job_t.c.id.in_(sa.select(tree.c.id)), job_t.c.status.not_in(TERMINAL_JOB_STATUSES)
        )
        with self.catalog.read() as conn:
            return int(conn.execute(q).scalar_one())

    def wait_for(
        self, job_ids: Iterable[str], *, timeout_s: float | None = None, poll_s: float = 0.1
    ) -> list[Job]:
        """Block until every job is terminal (their children are not implied); return them in
        the order given. Raises ``Unavailable`` on timeout, ``NotFound`` for an unknown id."""
        ids = list(dict.fromkeys(job_ids))
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            jobs = self.get_many(ids)
            missing = [i for i in ids if i not in jobs]
            if missing:
                raise NotFound(f"no job {missing[0]}", job_ids=missing)
            if all(j.is_terminal for j in jobs.values()):
                return [jobs[i] for i in ids]
            if deadline is not None and time.monotonic() >= deadline:
                waiting = [i for i in ids if not jobs[i].is_terminal]
                raise Unavailable(
                    f"{len(waiting)} job(s) did not finish within {timeout_s:g} s",
                    job_ids=waiting,
                )
            time.sleep(poll_s)

    # --- cancel --------------------------------------------------------------------------
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
                    .where(job_t.c.id.in_(chunk), job_t.c.status == "pending")
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
                        job_t.c.status == "running",
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
            self.call_on_settled(job, "cancelled", None)

    def cancel_and_wait(self, job_ids: Iterable[str], *, timeout_s: float = 30) -> None:
        """Request the cancel and block until every job is terminal. Never call this while
        holding a base lock: the handler being cancelled may be waiting for that lock.
        Raises ``Unavailable`` on timeout."""
        ids = list(dict.fromkeys(job_ids))
        self.request_cancel(ids)
        deadline = time.monotonic() + timeout_s
        next_sweep = 0.0
        while True:
            jobs = self.get_many(ids)
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
                self.recover()
                next_sweep = time.monotonic() + 1.0
            time.sleep(0.05)

    def cancel_queue(self, queue: str, *, timeout_s: float = 30, page: int = 500) -> int:
        """Cancel **every** pending or running job of ``queue`` and wait until none is left,
        ``page`` jobs at a time; jobs their handlers enqueue meanwhile are cancelled too.
        Returns how many were cancelled. Raises ``Unavailable`` past ``timeout_s`` in all.
        Never call this while holding a base lock (see :meth:`cancel_and_wait`)."""
        deadline = time.monotonic() + timeout_s
        done = 0
        while ids := self.active_job_ids(queue=queue, limit=page):
            left = deadline - time.monotonic()
            if left <= 0:  # handlers keep enqueueing faster than we cancel
                raise Unavailable(
                    f"jobs of {queue} still active after {timeout_s:g} s", queue=queue
                )
            self.cancel_and_wait(ids, timeout_s=left)
            done += len(ids)
        return done

    # --- claim and attempts --------------------------------------------------------------
    def claim(
        self, worker_id: str, *, queues: Iterable[str] | None = None, limit: int = 1
    ) -> list[Job]:
        """Atomically move up to ``limit`` due pending jobs of registered kinds to ``running``
        for ``worker_id``, oldest ``run_at`` first, keeping at most ``queue_concurrency``
        running per queue and ``global_concurrency`` in all (counted over every worker)."""
        kinds = list(self._registry)
        if limit <= 0 or not kinds:
            return []
        queue_list = None if queues is None else list(queues)
        with self.catalog.write_tx() as conn:
            now = self._ms()
            if conn.dialect.name == "postgresql":
                # Caps need a consistent count of running jobs: serialise claims (the window
                # paged read below takes no FOR UPDATE SKIP LOCKED; the lock makes it needless).
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(7244211)"))
            running: dict[str, int] = dict(
                conn.execute(
                    sa.select(job_t.c.queue, sa.func.count())
                    .where(job_t.c.status == "running")
                    .group_by(job_t.c.queue)
                ).all()
            )
            room = min(limit, self.global_concurrency - sum(running.values()))
            if room <= 0:
                return []
            picked = self._pick_due(conn, now, kinds, queue_list, running, room)
            if not picked:
                return []
            rows = conn.execute(
                sa.update(job_t)
                .where(job_t.c.id.in_(picked), job_t.c.status == "pending")
                .values(
                    status="running",
                    locked_by=worker_id,
                    lease_until=now + int(self.lease_s * 1000),
                    attempts=job_t.c.attempts + 1,
                    updated_at=now,
                )
                .returning(*job_t.c)
            ).all()
        by_id = {r.id: Job.from_row(r) for r in rows}
        return [by_id[i] for i in picked if i in by_id]

    def _pick_due(
        self,
        conn: Connection,
        now: int,
        kinds: list[str],
        queue_list: list[str] | None,
        running: dict[str, int],
        room: int,
    ) -> list[str]:
        """Ids of up to ``room`` due pending jobs, oldest first, each queue taking no more than
        its free running slots. Reads pending jobs in claim order a page at a time and stops
        once it has enough: ranking every pending job per claim (a window over the queue)
        made a 100k-file import's claims cost the size of its backlog."""
        free = {q: self.queue_concurrency - n for q, n in running.items()}
        order = (job_t.c.run_at, job_t.c.created_at, job_t.c.id)
        due = sa.select(*order, job_t.c.queue).where(
            job_t.c.status == "pending", job_t.c.run_at <= now, job_t.c.kind.in_(kinds)
        )
        if queue_list is not None:
            due = due.where(job_t.c.queue.in_(queue_list))
        picked: list[str] = []
        after: tuple[int, int, str] | None = None
        while True:
            page_q = due if after is None else due.where(sa.tuple_(*order) > after)
            page = conn.execute(page_q.order_by(*order).limit(CLAIM_PAGE)).all()
            for _run_at, _created_at, job_id, queue in page:
                if free.setdefault(queue, self.queue_concurrency) > 0:
                    free[queue] -= 1
                    picked.append(job_id)
                    if len(picked) >= room:
                        return picked
            if len(page) < CLAIM_PAGE:
                return picked
            after = (page[-1][0], page[-1][1], page[-1][2])

    def _owns(self, job: Job, worker_id: str, *, conn: Connection | None = None) -> bool:
        args = _owner_args(job, worker_id)
        if conn is not None:
            return conn.execute(_OWNS, args).first() is not None
        with self.catalog.read() as c:
            return c.execute(_OWNS, args).first() is not None

    def _write_progress(
        self, job: Job, worker_id: str, stage: str, percent: float | None, details: dict
    ) -> None:
        with self.catalog.write_tx() as conn:
            conn.execute(
                sa.update(job_t)
                .where(_owned(job, worker_id))
                .values(**_progress_values(stage, percent, details), updated_at=self._ms())
            )

    def attach(self, ctx: JobContext) -> None:
        with self._live_lock:
            self._live[ctx.job.id] = ctx

    def detach(self, ctx: JobContext) -> None:
        with self._live_lock:
            if self._live.get(ctx.job.id) is ctx:
                del self._live[ctx.job.id]

    def finish(
        self,
        job: Job,
        worker_id: str,
        decision: Decision,
        *,
        error: BaseException | None = None,
        progress: tuple[str, float | None, dict[str, Any]] | None = None,
    ) -> Job | None:
        """Persist the end of one attempt; None when the attempt no longer owns the job (it
        was recovered, or a newer attempt runs), in which case nothing is written. Calls
        ``on_settled`` after the commit for ``failed``/``cancelled``."""
        values: dict[str, Any] = {
            "status": decision.status,
            "error_code": decision.error_code,
            "error_message": decision.error_message,
            "lease_until": None,
        }
        if progress is not None:
            values.update(_progress_values(*progress))
        with self.catalog.write_tx() as conn:
            now = self._ms()  # under the write lock, like every stamp the change feed reads
            values["updated_at"] = now
            if decision.status == "pending":
                values.update(locked_by=None, run_at=now + int(decision.delay_s * 1000))
            else:
                values.update(active_key=None, finished_at=now)
            row = conn.execute(
                sa.update(job_t).where(_owned(job, worker_id)).values(values).returning(*job_t.c)
            ).first()
            if row is not None and (decision.status != "pending" or decision.delay_s <= 0):
                # Retried at once, or a running slot of the queue freed (caps count them).
                self.wakeups.notify(conn, job.queue)
        if row is None:
            return None
        after = Job.from_row(row)
        if after.status in ("failed", "cancelled"):
            self.call_on_settled(after, after.status, error)
        return after

    def complete_in(
        self, conn: Connection, job: Job, worker_id: str, stage: str, details: dict[str, Any]
    ) -> bool:
        """:meth:`finish` of a completed attempt inside the caller's write transaction (one
        prebuilt UPDATE, no row read back): whether the attempt still owned the job (and now
        completed it)."""
        progress = _progress_values(stage, 100.0, details)
        args = {
            **_owner_args(job, worker_id),
            "stage": progress["progress_stage"],
            "details": progress["progress_details"],
            "now": self._ms(),  # under the write lock, like every stamp the change feed reads
        }
        if not conn.execute(_COMPLETE, args).rowcount:
            return False
        self.wakeups.notify(conn, job.queue)  # a running slot of the queue freed
        return True

    def call_on_settled(self, job: Job, status: str, error: BaseException | None) -> None:
        """Run the kind's ``on_settled`` outside any transaction; its errors are logged."""
        reg = self._registry.get(job.kind)
        if reg is None or reg.on_settled is None:
            return
        try:
            reg.on_settled(job, status, error)
        except Exception:
            log.exception("on_settled of %s raised; ignored", job.call_string)


def _progress_values(stage: str, percent: float | None, details: dict[str, Any]) -> dict:
    return {
        "progress_stage": stage,
        "progress_percent": None if percent is None else float(percent),
        "progress_details": json.dumps(details, ensure_ascii=False, default=str),
    }


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
