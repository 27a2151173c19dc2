"""Job workers in this process: start and stop them with the periodic recovery sweep, wait for
a tree of jobs, and say at once when they are paused on a full disk.

``Knowledge`` holds one :class:`WorkerHost` and delegates its lifecycle methods to it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from knowbase.errors import Unavailable
from knowbase.operations.recovery import SweepReport, sweep
from knowbase.runtime import Runtime

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 15.0


class WorkerHost:
    """The workers (if any) and the recovery sweep of one ``Knowledge``."""

    def __init__(self, rt: Runtime, threads: int) -> None:
        self.rt, self.threads = rt, threads
        self.worker: Any = None
        self._sweeper: threading.Thread | None = None
        self._stop_sweeper = threading.Event()

    @property
    def running(self) -> bool:
        return self.worker is not None

    def start(self, *, threads: int | None = None) -> None:
        """Run job workers in this process (and the periodic recovery sweep)."""
        if self.worker is not None:
            return
        if self.rt.catalog.problem is not None:
            log.error("no job workers: %s", self.rt.catalog.problem.message)
            return
        from knowbase.jobs.worker import Worker

        self.recover()
        self.worker = Worker(self.rt.jobs, threads=threads or self.threads)
        self.worker.start()
        self._stop_sweeper.clear()
        self._sweeper = threading.Thread(target=self._sweep_loop, name="kb-sweep", daemon=True)
        self._sweeper.start()

    def stop(self, grace_s: float = 10) -> None:
        if self.worker is None:
            return
        self._stop_sweeper.set()
        self.worker.stop(grace_s=grace_s)
        self.worker = None

    def _sweep_loop(self) -> None:
        while not self._stop_sweeper.wait(SWEEP_INTERVAL_S):
            self.recover()

    def recover(self) -> SweepReport:
        """Recover interrupted jobs and items (also run at worker start)."""
        return sweep(self.rt)

    def run_until_idle(self, timeout_s: float = 600) -> None:
        """Process jobs here until nothing is claimable (tests, ``kb add``)."""
        started_here = self.worker is None
        if started_here:
            self.start()
        try:
            self.worker.run_until_idle(timeout_s=timeout_s)
        finally:
            if started_here:
                self.stop()

    def wait(self, job_ids: Iterable[str], *, timeout_s: float = 3600) -> None:
        """Block until the jobs and every job they spawned are terminal (runs workers here)."""
        started_here = self.worker is None
        if started_here:
            self.start()
        try:
            deadline = time.monotonic() + timeout_s
            roots = list(job_ids)
            count_at = 0.0  # when the tree may be counted again
            while True:
                # A home with no unfinished job at all is one index seek: the usual end.
                if not self.rt.jobs.queries.any_unfinished():
                    break
                asked = time.monotonic()
                if asked >= count_at:
                    if not self.rt.jobs.queries.tree_active(roots):
                        break
                    # The count walks the whole job tree: over a 100k-file import that took
                    # half the process's CPU at 4 polls/s. Counting at most a tenth of the
                    # time bounds it.
                    count_at = time.monotonic() + max(0.25, 9 * (time.monotonic() - asked))
                self.check()
                if time.monotonic() > deadline:
                    raise Unavailable(f"jobs still running after {timeout_s:.0f} s", jobs=roots)
                # The worker here goes idle right after the tree's last job (when it ran
                # here): the wait ends then, not at the next count.
                self.worker.wait_idle(max(0.0, count_at - time.monotonic()))
        finally:
            if started_here:
                self.stop()

    def check(self) -> None:
        """Raise ``DiskFull`` while the workers are paused on a full disk, so a waiting caller
        says so now instead of waiting for ever; the unsettled jobs resume once space returns
        (their kinds recover by ``retry``)."""
        error = self.worker.disk.error if self.worker is not None else None
        if error is not None:
            raise error
