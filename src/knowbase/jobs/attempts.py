"""One attempt's writes: the ownership check, progress, and its end (:meth:`Attempts.finish`).

Every UPDATE here is conditional on ``locked_by`` + ``attempts`` (the attempt still owns the
row), so a stale attempt — recovered meanwhile, or overtaken by a newer one — never overwrites a
newer state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog.db import Catalog
from knowbase.catalog.schema import job as job_t
from knowbase.jobs.model import Job
from knowbase.jobs.registry import JobRegistry
from knowbase.jobs.retry import JOB_CANCELLED, Decision
from knowbase.jobs.wakeups import JobWakeups

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


class Attempts:
    """Writes of running attempts, each only while the attempt still owns its job."""

    def __init__(
        self,
        catalog: Catalog,
        registry: JobRegistry,
        wakeups: JobWakeups,
        ms: Callable[[], int],
    ) -> None:
        self.catalog = catalog
        self.registry = registry
        self.wakeups = wakeups
        self._ms = ms

    def owns(self, job: Job, worker_id: str, *, conn: Connection | None = None) -> bool:
        args = _owner_args(job, worker_id)
        if conn is not None:
            return conn.execute(_OWNS, args).first() is not None
        with self.catalog.read() as c:
            return c.execute(_OWNS, args).first() is not None

    def owned_ids(self, conn: Connection, jobs: Sequence[Job], worker_id: str) -> set[str]:
        """:meth:`owns` of many attempts in one statement per 500 (an index batch's fence,
        read in its write transaction): the ids whose attempt still owns its row."""
        want = {job.id: job.attempts for job in jobs}
        ids, owned = list(want), set()
        for at in range(0, len(ids), 500):
            rows = conn.execute(
                sa.select(job_t.c.id, job_t.c.attempts).where(
                    job_t.c.id.in_(ids[at : at + 500]),
                    job_t.c.status == "running",
                    job_t.c.locked_by == worker_id,
                )
            )
            owned.update(job_id for job_id, attempts in rows if want[job_id] == attempts)
        return owned

    def write_progress(
        self, job: Job, worker_id: str, stage: str, percent: float | None, details: dict
    ) -> None:
        with self.catalog.write_tx() as conn:
            conn.execute(
                sa.update(job_t)
                .where(_owned(job, worker_id))
                .values(**_progress_values(stage, percent, details), updated_at=self._ms())
            )

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
            owned = sa.update(job_t).where(_owned(job, worker_id))
            if decision.status == "pending":
                # A cancel requested while the attempt ran wins over its retry: requeued, the
                # job would wait for a worker only to be cancelled at its claim (issue 37).
                owned = owned.where(job_t.c.cancel_requested == sa.false())
            row = conn.execute(owned.values(values).returning(*job_t.c)).first()
            if row is None and decision.status == "pending":
                cancelled: dict[str, Any] = {
                    "status": "cancelled",
                    "error_code": JOB_CANCELLED,
                    "error_message": f"cancelled while it ran (its attempt: {decision.error_code})",
                    "lease_until": None,
                    "active_key": None,
                    "finished_at": now,
                    "updated_at": now,
                }
                if progress is not None:
                    cancelled.update(_progress_values(*progress))
                row = conn.execute(
                    sa.update(job_t)
                    .where(_owned(job, worker_id))
                    .values(cancelled)
                    .returning(*job_t.c)
                ).first()
            if row is not None and (row.status != "pending" or decision.delay_s <= 0):
                # Retried at once, or a running slot of the queue freed (caps count them).
                self.wakeups.notify(conn, job.queue)
        if row is None:
            return None
        after = Job.from_row(row)
        if after.status in ("failed", "cancelled"):
            self.registry.call_on_settled(after, after.status, error)
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

    def complete_many_in(
        self, conn: Connection, done: list[tuple[Job, dict[str, Any]]], worker_id: str
    ) -> int:
        """:meth:`complete_in` of many attempts in one executemany (an index batch whose
        fences the caller read in this same SQLite write transaction): how many completed."""
        if not done:
            return 0
        now = self._ms()
        args = []
        for job, details in done:
            progress = _progress_values("done", 100.0, details)
            args.append(
                {
                    **_owner_args(job, worker_id),
                    "stage": progress["progress_stage"],
                    "details": progress["progress_details"],
                    "now": now,
                }
            )
        count = conn.execute(_COMPLETE, args).rowcount
        self.wakeups.notify(conn, done[0][0].queue)  # running slots of the queue freed
        return count


def _progress_values(stage: str, percent: float | None, details: dict[str, Any]) -> dict:
    return {
        "progress_stage": stage,
        "progress_percent": None if percent is None else float(percent),
        "progress_details": json.dumps(details, ensure_ascii=False, default=str),
    }


__all__ = ["Attempts"]
