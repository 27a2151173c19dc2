"""Which job kinds this process runs: each kind's handler and its ``on_settled`` callback."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from knowbase.errors import KnowbaseError
from knowbase.jobs.context import JobContext
from knowbase.jobs.model import Job, JobKind

log = logging.getLogger("knowbase.jobs")

Handler = Callable[[JobContext], None]
# Runs many claimed jobs of one kind and queue in one attempt group: returns each job's error
# (None: it completed or has nothing to do); the worker settles every attempt on its own.
BatchHandler = Callable[[list[JobContext]], dict[str, BaseException | None]]
OnSettled = Callable[[Job, str, BaseException | None], None]


@dataclass(frozen=True)
class Registration:
    kind: JobKind
    handler: Handler | None  # None: the kind runs only through ``batch_handler``
    on_settled: OnSettled | None
    batch_handler: BatchHandler | None = None
    batch_max: int = 1  # jobs one claim hands to ``batch_handler`` at once
    # batches of this kind one worker runs at once: enough to overlap reading, the model and
    # writing; more only contend for the same cores and hold more documents in memory
    batch_concurrency: int = 4


class JobRegistry:
    """Kinds by name. A process claims and recovers only the kinds it has registered."""

    def __init__(self) -> None:
        self._registrations: dict[str, Registration] = {}
        self._loader: Callable[[], None] | None = None
        self._loading = threading.RLock()  # other threads wait for the kinds; the loader's own
        self._in_load = False  # lookups (re-entrant, same thread) see what is registered so far

    def load_with(self, loader: Callable[[], None]) -> None:
        """Register the kinds by calling ``loader`` the first time a kind is looked up, not
        now: handlers import every operation, which a process that never enqueues, cancels
        or claims (``kb search``) does not need (issue 39 item 5)."""
        self._loader = loader

    @property
    def _by_name(self) -> dict[str, Registration]:
        if self._loader is not None:
            with self._loading:
                loader = self._loader
                if loader is not None and not self._in_load:
                    self._in_load = True
                    try:
                        loader()
                    finally:
                        self._in_load = False
                    self._loader = None
        return self._registrations

    def register(
        self,
        kind: JobKind,
        handler: Handler | None,
        on_settled: OnSettled | None,
        *,
        batch_handler: BatchHandler | None = None,
        batch_max: int = 1,
        batch_concurrency: int = 4,
    ) -> None:
        if handler is None and batch_handler is None:
            raise ValueError(f"job kind {kind.name}: a handler or a batch handler is needed")
        if batch_handler is None:
            batch_max = 1
        reg = Registration(
            kind, handler, on_settled, batch_handler, max(1, batch_max), max(1, batch_concurrency)
        )
        self._registrations[kind.name] = reg

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_name

    def get(self, kind: str) -> Registration | None:
        return self._by_name.get(kind)

    def registration(self, kind: str) -> Registration:
        """The kind's registration; a ``KnowbaseError`` when this process does not know it."""
        try:
            return self._by_name[kind]
        except KeyError:
            raise KnowbaseError(
                f"job kind {kind!r} is not registered with this JobManager", kind=kind
            ) from None

    def batch_max(self, kind: str) -> int:
        """How many jobs of ``kind`` one claim may group into one attempt group (1: none)."""
        reg = self._by_name.get(kind)
        return reg.batch_max if reg is not None else 1

    def names(self) -> list[str]:
        """The registered kind names, in registration order."""
        return list(self._by_name)

    def call_on_settled(self, job: Job, status: str, error: BaseException | None) -> None:
        """Run the kind's ``on_settled`` outside any transaction; its errors are logged."""
        reg = self._by_name.get(job.kind)
        if reg is None or reg.on_settled is None:
            return
        try:
            reg.on_settled(job, status, error)
        except Exception:
            log.exception("on_settled of %s raised; ignored", job.call_string)


__all__ = ["BatchHandler", "Handler", "JobRegistry", "OnSettled", "Registration"]
