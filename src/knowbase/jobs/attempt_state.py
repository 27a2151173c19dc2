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

    @property
    def ending(self) -> bool:
        return self._ending


__all__ = ["Attempt"]
