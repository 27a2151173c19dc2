"""A full disk: how to recognise it, and how a worker backs off while it lasts (issue 26).

When the disk holding the home fills, every write fails -- the index's, the raw/ copies', and
the catalog's own (so neither a job's outcome nor an item's status can be recorded). A worker
that kept claiming logged a "loop error" five times a second and ``kb add`` never returned.
Now the first disk-full error a worker meets (a handler's, a claim's, a heartbeat's) pauses its
claiming: 1 s, doubling to 30 s while the disk stays full, one log line per episode; a waiting
caller (``Knowledge.wait``) raises :class:`~knowbase.errors.DiskFull` at once. Jobs it could not
settle stay as they are and resume when space returns (their kinds recover by ``retry``); jobs
whose outcome can be written retry with backoff and end ``failed`` with ``disk_full``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from knowbase.diskspace import as_disk_full, is_disk_full
from knowbase.errors import DiskFull

log = logging.getLogger("knowbase.jobs")


class DiskFullBackoff:
    """A worker's pause while the disk is full: ``hit`` starts or extends it, ``clear`` ends
    it (a write went through). Thread-safe; ``clock`` is real time in seconds."""

    def __init__(
        self,
        *,
        first_s: float = 1.0,
        max_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.first_s, self.max_s, self.clock = first_s, max_s, clock
        self._lock = threading.Lock()
        self._until = 0.0
        self._pause = 0.0
        self.error: DiskFull | None = None  # the episode's last error, None when none

    def hit(self, exc: BaseException, where: str) -> None:
        """Note a disk-full error; the first of an episode is logged (once)."""
        with self._lock:
            first = self.error is None
            self.error = as_disk_full(exc)
            self._pause = self.first_s if first else min(self._pause * 2, self.max_s)
            self._until = self.clock() + self._pause
        if first:
            log.error(
                "disk full (%s): %s; claiming paused until space returns (%s)",
                where,
                self.error.message,
                self.error.hint,
            )

    def clear(self) -> None:
        with self._lock:
            if self.error is not None:
                log.warning("disk space is back: claiming resumes")
            self.error, self._pause, self._until = None, 0.0, 0.0

    @property
    def paused_s(self) -> float:
        """Seconds left in the current pause (0: claim)."""
        return max(0.0, self._until - self.clock())


__all__ = ["DiskFullBackoff", "as_disk_full", "is_disk_full"]
