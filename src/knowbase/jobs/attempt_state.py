"""One attempt of one job inside a worker (:mod:`.worker`), and the group it runs with."""

from __future__ import annotations

import threading

from knowbase.jobs.context import JobContext
from knowbase.jobs.model import Job
from knowbase.jobs.registry import Registration


class Attempt:
    """One attempt of one job in this worker. ``end()`` lets exactly one party decide it."""

    def __init__(self, job: Job, ctx: JobContext, reg: Registration, started: float) -> None:
        self.job = job
        self.ctx = ctx
        self.reg = reg
        self.started = started  # manager clock
        self.deadline = started + reg.kind.timeout_s
        self.cancel_seen_at: float | None = None
        self.group: list[Attempt] = [self]  # the attempts run together (a batch), this one too
        self.done = threading.Event()  # set after the outcome was persisted
        self._ending = False
        self._lock = threading.Lock()

    def end(self) -> bool:
        """True for the first caller only: it decides and persists the outcome."""
        with self._lock:
            if self._ending:
                return False
            self._ending = True
            return True

    def end_from_worker(self) -> bool:
        """:meth:`end` for the worker's own reasons (timeout, lost lease, cancel grace), but
        never once the handler's final transaction carries the job's completion: atomic with
        :meth:`JobContext.complete_in`, so the two cannot both decide one attempt."""
        # Never wait here (the supervisor and the heartbeat of every job call this): a fence
        # held means the handler is writing its completion now; the next pass sees how it went.
        if not self.ctx.fence.acquire(blocking=False):
            return False
        try:
            if self.ctx.completing or not self.end():
                return False
            self.ctx.worker_ended = True
            return True
        finally:
            self.ctx.fence.release()

    @property
    def ending(self) -> bool:
        return self._ending


__all__ = ["Attempt"]
