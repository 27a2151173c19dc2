"""Leases, heartbeats and the recovery sweep: a collaborator of :class:`~.manager.JobManager`.

Recovery follows jobs, never a blanket UPDATE: each orphaned running job is released by its own
conditional UPDATE (still running, same ``locked_by``, same ``attempts``), so a sweep racing a
worker that just finished changes nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from knowbase.catalog.schema import job as job_t
from knowbase.catalog.schema import worker as worker_t
from knowbase.jobs.liveness import parse_worker_id, worker_is_dead_here
from knowbase.jobs.model import Job, JobKind
from knowbase.jobs.retry import JOB_CANCELLED, JOB_INTERRUPTED
from knowbase.processes import this_host

if TYPE_CHECKING:
    from knowbase.catalog.db import Catalog
    from knowbase.jobs.registry import JobRegistry
    from knowbase.jobs.wakeups import JobWakeups

log = logging.getLogger("knowbase.jobs")

_CHUNK = 500  # ids per IN (...) list, well under SQLite's variable limit


def chunks(ids: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


@dataclass(frozen=True)
class RecoveryReport:
    """What one sweep did, by job id."""

    cancelled: tuple[str, ...] = ()
    requeued: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    skipped_unknown_kind: tuple[str, ...] = ()
    workers_removed: int = 0

    @property
    def count(self) -> int:
        return len(self.cancelled) + len(self.requeued) + len(self.failed)


class Leases:
    """Worker rows, lease renewal, release and the recovery sweep."""

    def __init__(
        self,
        catalog: Catalog,
        registry: JobRegistry,
        wakeups: JobWakeups,
        ms: Callable[[], int],
        *,
        lease_s: float,
    ) -> None:
        self.catalog = catalog
        self.registry = registry
        self.wakeups = wakeups
        self._ms = ms
        self.lease_s = lease_s

    def register_worker(self, worker_id: str) -> None:
        wid = parse_worker_id(worker_id)
        now = self._ms()
        with self.catalog.write_tx() as conn:
            conn.execute(sa.delete(worker_t).where(worker_t.c.id == worker_id))
            conn.execute(
                sa.insert(worker_t).values(
                    id=worker_id,
                    host=wid.host if wid else this_host(),
                    pid=wid.pid if wid else os.getpid(),
                    started_at=wid.started_ms if wid else now,
                    heartbeat_at=now,
                )
            )

    def unregister_worker(self, worker_id: str) -> None:
        with self.catalog.write_tx() as conn:
            conn.execute(sa.delete(worker_t).where(worker_t.c.id == worker_id))

    def heartbeat(self, worker_id: str, job_ids: Iterable[str]) -> tuple[set[str], set[str]]:
        """Renew the worker's heartbeat and the leases of its running jobs, in one
        transaction. Returns (jobs still owned, owned jobs with a cancel requested)."""
        ids = list(job_ids)
        now = self._ms()
        owned: set[str] = set()
        cancel: set[str] = set()
        with self.catalog.write_tx() as conn:
            conn.execute(
                sa.update(worker_t).where(worker_t.c.id == worker_id).values(heartbeat_at=now)
            )
            for chunk in chunks(ids):
                rows = conn.execute(
                    sa.update(job_t)
                    .where(
                        job_t.c.id.in_(chunk),
                        job_t.c.status == "running",
                        job_t.c.locked_by == worker_id,
                    )
                    .values(lease_until=now + int(self.lease_s * 1000))
                    .returning(job_t.c.id, job_t.c.cancel_requested)
                ).all()
                for job_id, requested in rows:
                    owned.add(job_id)
                    if requested:
                        cancel.add(job_id)
        return owned, cancel

    def release(self, job: Job, worker_id: str | None, reason: str) -> Job | None:
        """End a running attempt that will not finish, by its kind's recovery policy:
        ``abandon`` (or a cancel was requested) → cancelled; ``retry`` → pending while attempts
        remain, else failed. Conditional on the attempt still owning the job."""
        reg = self.registry.get(job.kind)
        if reg is None:
            return None
        owner = job_t.c.locked_by.is_(None) if worker_id is None else job_t.c.locked_by == worker_id
        with self.catalog.write_tx() as conn:
            # The row's cancel flag, not the claimed snapshot's: a cancel requested while the
            # attempt ran must end it cancelled, not requeue it (issue 37).
            asked = conn.execute(
                sa.select(job_t.c.cancel_requested).where(job_t.c.id == job.id)
            ).scalar()
            if asked and not job.cancel_requested:
                job = replace(job, cancel_requested=True)
            values = _recovery_values(job, reg.kind, reason, self._ms())
            row = conn.execute(
                sa.update(job_t)
                .where(
                    job_t.c.id == job.id,
                    job_t.c.status == "running",
                    owner,
                    job_t.c.attempts == job.attempts,
                )
                .values(values)
                .returning(*job_t.c)
            ).first()
            if row is not None:
                self.wakeups.notify(conn, job.queue)  # requeued, or a running slot freed
        if row is None:
            return None
        after = Job.from_row(row)
        log.warning("%s released (%s) → %s", job.call_string, reason, after.status)
        if after.status in ("failed", "cancelled"):
            self.registry.call_on_settled(after, after.status, None)
        return after

    def recover(self) -> RecoveryReport:
        """The sweep: running jobs whose lease lapsed, or whose ``locked_by`` names a dead
        process on this host, go to their kind's recovery policy (see :meth:`release`).
        Pending jobs are never touched; jobs of kinds this process has not registered are
        left for a process that knows them. Also drops worker rows of dead local pids."""
        now = self._ms()
        running = job_t.c.status == "running"
        with self.catalog.read() as conn:
            workers = conn.execute(sa.select(worker_t.c.id)).scalars().all()
            # Only the orphans are read: a lapsed lease, or a holder that is dead here. The
            # holders are few (one per worker process), so the second test is a short IN list.
            holders = conn.execute(
                sa.select(job_t.c.locked_by).where(running).group_by(job_t.c.locked_by)
            ).scalars()
            dead_holders = [h for h in holders if h is not None and worker_is_dead_here(h)]
            orphaned = sa.or_(job_t.c.lease_until < now, job_t.c.locked_by.in_(dead_holders))
            rows = conn.execute(sa.select(job_t).where(running, orphaned)).all()
        cancelled: list[str] = []
        requeued: list[str] = []
        failed: list[str] = []
        skipped: list[str] = []
        for row in rows:
            job = Job.from_row(row)
            if job.lease_until is not None and job.lease_until < now:
                reason = "lease lapsed"
            elif worker_is_dead_here(job.locked_by):
                reason = f"worker {job.locked_by} is dead"
            else:
                continue
            if job.kind not in self.registry:
                skipped.append(job.id)
                continue
            after = self.release(job, job.locked_by, reason)
            if after is None:
                continue  # its worker finished it meanwhile
            {"cancelled": cancelled, "pending": requeued, "failed": failed}[after.status].append(
                job.id
            )
        dead = [w for w in workers if worker_is_dead_here(w)]
        if dead:
            with self.catalog.write_tx() as conn:
                conn.execute(sa.delete(worker_t).where(worker_t.c.id.in_(dead)))
        return RecoveryReport(
            tuple(cancelled), tuple(requeued), tuple(failed), tuple(skipped), len(dead)
        )


def _recovery_values(job: Job, kind: JobKind, reason: str, now: int) -> dict[str, Any]:
    if job.cancel_requested or kind.recovery == "abandon":
        code = JOB_CANCELLED if job.cancel_requested else JOB_INTERRUPTED
        status = "cancelled"
    elif job.attempts >= job.max_attempts:
        code, status = JOB_INTERRUPTED, "failed"
    else:
        # Back to the queue at once: the interruption was not the job's fault.
        return {
            "status": "pending",
            "locked_by": None,
            "lease_until": None,
            "run_at": now,
            "error_code": JOB_INTERRUPTED,
            "error_message": f"interrupted: {reason}",
            "updated_at": now,
        }
    return {
        "status": status,
        "active_key": None,
        "lease_until": None,
        "finished_at": now,
        "error_code": code,
        "error_message": f"interrupted: {reason}",
        "updated_at": now,
    }


__all__ = ["Leases", "RecoveryReport", "chunks"]
