"""Worker identity (``host:pid:start-ms``) and whether the process it names is still alive.

A lease lapse catches every kind of death, in any host, after ``lease_s``. A worker on *this*
host that died (``kill -9``, OOM, power cut of a laptop lid…) is caught at once: its pid is
gone, or now belongs to a process that started after the worker did (pid reuse).
:func:`list_live_workers` reads who is alive by heartbeat, on every host (``kb status``).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from knowbase.catalog.schema import job as job_t
from knowbase.catalog.schema import worker as worker_t
from knowbase.processes import pid_alive, this_host

if TYPE_CHECKING:
    from knowbase.catalog.db import Catalog


@dataclass(frozen=True)
class WorkerId:
    host: str
    pid: int
    started_ms: int

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.started_ms}"


_last_ms = 0
_ids_lock = threading.Lock()


def make_worker_id(now_ms: int | None = None) -> str:
    """A new id for a worker of this process: ``host:pid:start-ms`` (wall clock). Two ids made
    in one process never share the millisecond, so two managers never pass for one worker."""
    global _last_ms
    with _ids_lock:
        started = int(time.time() * 1000) if now_ms is None else now_ms
        started = max(started, _last_ms + 1)
        _last_ms = started
    return str(WorkerId(this_host(), os.getpid(), started))


def parse_worker_id(text: str | None) -> WorkerId | None:
    """The parts of a ``locked_by`` value, or None when it is not one of ours."""
    if not text:
        return None
    parts = text.rsplit(":", 2)
    if len(parts) != 3:
        return None
    host, pid, started = parts
    try:
        return WorkerId(host, int(pid), int(started))
    except ValueError:
        return None


def worker_is_dead_here(locked_by: str | None) -> bool:
    """True only when ``locked_by`` names a process on this host that is gone."""
    wid = parse_worker_id(locked_by)
    if wid is None or wid.host != this_host():
        return False
    return not pid_alive(wid.pid, wid.started_ms)


@dataclass(frozen=True)
class LiveWorker:
    """A worker row whose heartbeat is within the lease, with the jobs it holds now."""

    id: str
    host: str
    pid: int
    started_at: int  # ms since the epoch
    heartbeat_at: int  # ms since the epoch
    heartbeat_age_s: float
    jobs_held: int  # running jobs locked by it

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def list_live_workers(
    catalog: Catalog, *, now: int | None = None, lease_s: float = 30
) -> list[LiveWorker]:
    """Workers of any process or host with a heartbeat within ``lease_s`` (``now`` in ms,
    default: wall clock), by id, each with its count of running jobs (one read)."""
    now = int(time.time() * 1000) if now is None else now
    held = (
        sa.select(job_t.c.locked_by, sa.func.count().label("n"))
        .where(job_t.c.status == "running")
        .group_by(job_t.c.locked_by)
        .subquery()
    )
    q = (
        sa.select(worker_t, sa.func.coalesce(held.c.n, 0).label("jobs_held"))
        .outerjoin(held, held.c.locked_by == worker_t.c.id)
        .where(worker_t.c.heartbeat_at >= now - int(lease_s * 1000))
        .order_by(worker_t.c.id)
    )
    with catalog.read() as conn:
        rows = conn.execute(q).all()
    return [
        LiveWorker(
            id=r.id,
            host=r.host,
            pid=r.pid,
            started_at=r.started_at,
            heartbeat_at=r.heartbeat_at,
            heartbeat_age_s=round(max(0, now - r.heartbeat_at) / 1000, 3),
            jobs_held=int(r.jobs_held),
        )
        for r in rows
    ]


__all__ = [
    "LiveWorker",
    "WorkerId",
    "list_live_workers",
    "make_worker_id",
    "parse_worker_id",
    "worker_is_dead_here",
]
