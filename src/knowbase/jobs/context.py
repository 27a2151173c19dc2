"""What a handler sees of its job: payload, cancellation, progress, and the attempt fence."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from typing import Any, Protocol

from sqlalchemy.engine import Connection

from knowbase.jobs.model import Cancelled, Job

#: At most one progress UPDATE per job per this many seconds (DESIGN, "SQLite connections").
PROGRESS_INTERVAL_S = 1.0


class AttemptRows(Protocol):
    """The attempt fence's writes a context makes (:class:`~knowbase.jobs.attempts.Attempts`)."""

    def owns(self, job: Job, worker_id: str, *, conn: Connection | None = None) -> bool: ...

    def write_progress(
        self, job: Job, worker_id: str, stage: str, percent: float | None, details: dict
    ) -> None: ...

    def complete_in(
        self, conn: Connection, job: Job, worker_id: str, stage: str, details: dict[str, Any]
    ) -> bool: ...

    def complete_many_in(
        self, conn: Connection, done: list[tuple[Job, dict[str, Any]]], worker_id: str
    ) -> int: ...


class JobOwner(Protocol):
    """What a context needs of the job manager (:class:`~knowbase.jobs.manager.JobManager`):
    its clock and its attempt rows. A protocol, so that this module, which the registry and
    the attempts import, imports neither the manager nor the attempts."""

    attempts: AttemptRows

    def clock(self) -> float: ...


class JobContext:
    """Handed to a handler for one attempt of one job.

    ``job`` is the row as claimed (``job.attempts`` is this attempt's number). The worker sets
    ``cancel_event`` when a cancel is requested or the attempt timed out; a handler calls
    :meth:`check_cancelled` between steps, and :meth:`is_current_attempt` right before a final
    write (inside the same transaction when it can), so a late handler never overwrites a newer
    state.
    """

    def __init__(self, job: Job, manager: JobOwner, worker_id: str) -> None:
        self.job = job
        self.payload: dict[str, Any] = job.payload
        self.manager = manager
        self.worker_id = worker_id
        self.cancel_event = threading.Event()
        self._lock = threading.Lock()
        self._pending: tuple[str, float | None, dict[str, Any]] | None = None
        self._last_flush: float | None = None  # manager clock, seconds
        # Set by complete_in: the job's completion rides in the handler's own final transaction.
        self.completing = False
        # Set when the worker ended the attempt itself (timeout, lost lease): complete_in then
        # completes nothing. ``fence`` makes the two decisions exclusive.
        self.worker_ended = False
        self.fence = threading.Lock()

    @property
    def job_id(self) -> str:
        return self.job.id

    def check_cancelled(self) -> None:
        """Raise :class:`Cancelled` if a cancel was requested or the attempt was ended."""
        if self.cancel_event.is_set():
            raise Cancelled(f"{self.job.call_string} cancelled")

    def progress(self, stage: str, percent: float | None = None, **details: Any) -> None:
        """Record progress. Written at most once per second per job; the last value is always
        written when the attempt ends (and by the heartbeat meanwhile)."""
        with self._lock:
            self._pending = (stage, percent, details)
            now = self.manager.clock()
            due = self._last_flush is None or now - self._last_flush >= PROGRESS_INTERVAL_S
        if due:
            self.flush_progress()

    def note_progress(self, stage: str, percent: float | None = None, **details: Any) -> None:
        """Record progress without writing it now: the heartbeat writes it, or the attempt's
        final UPDATE carries it. For steps too short to be worth a transaction of their own."""
        with self._lock:
            self._pending = (stage, percent, details)

    def flush_progress(self, *, force: bool = False) -> bool:
        """Write the pending progress if one is waiting and the interval passed (or ``force``).
        Returns whether a write happened."""
        with self._lock:
            if self._pending is None:
                return False
            now = self.manager.clock()
            if (
                not force
                and self._last_flush is not None
                and now - self._last_flush < PROGRESS_INTERVAL_S
            ):
                return False
            stage, percent, details = self._pending
            self._pending = None
            self._last_flush = now
        self.manager.attempts.write_progress(self.job, self.worker_id, stage, percent, details)
        return True

    def take_pending_progress(self) -> tuple[str, float | None, dict[str, Any]] | None:
        """The progress not yet written (cleared); the final UPDATE of the attempt carries it."""
        with self._lock:
            pending, self._pending = self._pending, None
            return pending

    def is_current_attempt(self, conn: Connection | None = None) -> bool:
        """True while this attempt still owns the job: status running, locked by this worker,
        attempts unchanged. Pass the connection of the write transaction that holds the final
        writes, so the check and the writes commit together."""
        return self.manager.attempts.owns(self.job, self.worker_id, conn=conn)

    @staticmethod
    def complete_all_in(conn: Connection, done: list[tuple[JobContext, dict[str, Any]]]) -> None:
        """:meth:`complete_in` of many attempts of one worker, in one statement, for a batch
        handler that read every fence (``Attempts.owned_ids``) in this same SQLite
        write transaction: nothing can have ended them since."""
        if not done:
            return
        ctx0 = done[0][0]
        for ctx, _details in done:
            with ctx._lock:
                ctx._pending = None
        jobs = [(ctx.job, details) for ctx, details in done]
        with ExitStack() as fences:
            for ctx, _details in done:
                fences.enter_context(ctx.fence)
            if any(ctx.worker_ended for ctx, _ in done):
                raise RuntimeError("a batch's job timed out or lost its lease before its commit")
            if ctx0.manager.attempts.complete_many_in(conn, jobs, ctx0.worker_id) != len(done):
                raise RuntimeError("a batch's job changed owner inside its write transaction")
            for ctx, _details in done:
                ctx.completing = True

    def complete_in(self, conn: Connection, stage: str = "done", **details: Any) -> bool:
        """Mark the job completed inside the handler's final write transaction, so the
        worker writes nothing more once the handler returns (one transaction per job fewer).

        It is also the attempt fence (like :meth:`is_current_attempt`): it returns False,
        writing nothing, when this attempt no longer owns the job, and the caller must then
        write nothing either. The completion counts only if the handler returns normally:
        when the transaction (or the savepoint around the caller's writes) rolls back, the
        handler must raise, and the worker settles the attempt from that error as usual."""
        with self._lock:
            self._pending = None
        with self.fence:
            if self.worker_ended:  # timed out or lost its lease: the worker decides it
                return False
            self.completing = self.manager.attempts.complete_in(
                conn, self.job, self.worker_id, stage, details
            )
            return self.completing


__all__ = ["PROGRESS_INTERVAL_S", "JobContext"]
