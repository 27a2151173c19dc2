"""Two facts about OS processes: this host's name, and whether a pid still runs the process
that started then (pid reuse and unreaped zombies count as gone).

The jobs' worker ids (``host:pid:start-ms``) and an add's staging folders (``host~pid~ms~…``)
both name their owner this way, so a sweep can tell a dead owner on this host at once.
"""

from __future__ import annotations

import os
import socket
from functools import cache

__all__ = ["pid_alive", "this_host"]


@cache
def this_host() -> str:
    return socket.gethostname()


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
