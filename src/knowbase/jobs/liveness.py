"""Worker identity (``host:pid:start-ms``) and whether the process it names is still alive.

A lease lapse catches every kind of death, in any host, after ``lease_s``. A worker on *this*
host that died (``kill -9``, OOM, power cut of a laptop lid…) is caught at once: its pid is
gone, or now belongs to a process that started after the worker did (pid reuse).
:func:`list_live_workers` reads who is alive by heartbeat, on every host (``kb status``).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from knowbase.catalog.schema import job as job_t
from knowbase.catalog.schema import worker as worker_t

if TYPE_CHECKING:
    from knowbase.catalog.db import Catalog


@dataclass(frozen=True)
class WorkerId:
    host: str
    pid: int
    started_ms: int

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.started_ms}"


@cache
def this_host() -> str:
    return socket.gethostname()


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


@cache
def _boot_time_s() -> float | None:
    try:
        with open("/proc/stat") as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def _process_start_s(pid: int) -> float | None:
    """Wall-clock start of ``pid`` on Linux (from /proc), else None."""
    boot = _boot_time_s()
    if boot is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        ticks = int(fields[19])  # field 22 overall: starttime in clock ticks since boot
    except (IndexError, ValueError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def pid_alive(pid: int, started_ms: int | None = None) -> bool:
    """Whether ``pid`` runs on this host and (when known) is the process that started no later
    than ``started_ms``. Unknown → alive: only the lease may then recover its jobs."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    except OSError:
        return True
    if started_ms is not None:
        start = _process_start_s(pid)
        # A process that started after the worker registered cannot be that worker: pid reuse.
        # The 2 s slack covers /proc's tick rounding and boot-time drift.
        if start is not None and start > started_ms / 1000 + 2:
            return False
    return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    # A killed child that its parent has not reaped yet still answers kill(0): read its state.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


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
    "pid_alive",
    "this_host",
    "worker_is_dead_here",
]
