"""Wake-ups for idle workers: a job of a queue became claimable, or a running one ended (a
concurrency slot freed).

The :class:`~knowbase.jobs.manager.JobManager` calls :meth:`JobWakeups.notify` inside the
transaction that made the change; nothing is sent before that transaction commits:

- on PostgreSQL by ``NOTIFY knowbase_jobs, '<queue>'`` in the transaction itself (the server
  delivers it at commit and drops it on rollback; equal notifications of one transaction are
  folded into one), heard by one ``LISTEN`` connection per process;
- in this process (either database) by a callback the catalog runs after the commit
  (``Catalog.write_tx``'s ``after_commit``), so SQLite homes wake their own workers at once.

Other processes on SQLite have no channel: their workers poll. Polling stays the fallback on
PostgreSQL too: a lost notification, or a LISTEN connection that dropped, costs at most one poll
interval; the listener reconnects, and wakes every subscriber whenever it (re)connects or drops,
because what was sent meanwhile went unheard.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from knowbase.catalog.db import Catalog

log = logging.getLogger("knowbase.jobs")

CHANNEL = "knowbase_jobs"
APPLICATION_NAME = "knowbase-job-wakeups"  # how the LISTEN session shows in pg_stat_activity
RECONNECT_S = 1.0  # wait between LISTEN attempts while the server is away
CHECK_S = 1.0  # how often the LISTEN loop looks at its stop flag

Subscriber = Callable[[str | None], None]  # the queue woken; None: any (after an outage)


class JobWakeups:
    """Publishes "queue Q has work" to the workers of every process. One per JobManager."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        self._subscribers: dict[int, Subscriber] = {}
        self._next = 0
        self._lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._stop = threading.Event()
        #: Set while other processes' notifications are heard (PostgreSQL, LISTEN up).
        self.listening = threading.Event()

    @property
    def cross_process(self) -> bool:
        """Whether other processes can wake ours (PostgreSQL only)."""
        return not self._catalog.is_sqlite

    # --- sending -------------------------------------------------------------------------
    def notify(self, conn: Connection, queue: str) -> None:
        """Within ``conn``'s write transaction: wake the workers of ``queue`` once it commits."""
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_notify(:c, :q)"), {"c": CHANNEL, "q": queue})
        # One hook per transaction: Catalog.write_tx runs ``after_commit`` after a commit and
        # drops it otherwise.
        hooks: list = conn.info.setdefault("kb_after_commit", [])
        for hook in hooks:
            if isinstance(hook, _WakeAfterCommit) and hook.wakeups is self:
                hook.queues.add(queue)
                return
        hooks.append(_WakeAfterCommit(self, {queue}))

    def wake(self, queue: str | None) -> None:
        """Call every subscriber of this process (their errors are logged)."""
        with self._lock:
            subscribers = list(self._subscribers.values())
        for callback in subscribers:
            try:
                callback(queue)
            except Exception:
                log.exception("job wake-up subscriber raised; ignored")

    # --- receiving -----------------------------------------------------------------------
    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(queue)`` on every wake-up; returns the unsubscribe function. The
        first subscriber starts the LISTEN thread (PostgreSQL)."""
        with self._lock:
            key = self._next
            self._next += 1
            self._subscribers[key] = callback
            if self.cross_process and self._listener is None and not self._stop.is_set():
                self._listener = threading.Thread(
                    target=self._listen_loop, name="kb-job-wakeups", daemon=True
                )
                self._listener.start()

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers.pop(key, None)

        return unsubscribe

    def close(self) -> None:
        """Stop listening for good (the listener also stops with its last subscriber)."""
        self._stop.set()
        listener = self._listener
        if listener is not None:
            listener.join(timeout=CHECK_S * 5)

    def _wanted(self) -> bool:
        """Whether this listener thread should go on; when not, it gives up its place (under
        the lock, so a subscriber arriving now starts a new one)."""
        with self._lock:
            if self._listener is not threading.current_thread():
                return False
            if self._subscribers and not self._stop.is_set():
                return True
            self._listener = None
            self.listening.clear()
            return False

    def _listen_loop(self) -> None:
        while self._wanted():
            try:
                self._listen()
            except Exception as exc:  # the server or the connection went away
                if self._wanted():
                    log.warning("job wake-ups: LISTEN failed (%s); polling until it is back", exc)
            if not self._wanted():
                return
            self.listening.clear()
            self.wake(None)  # whatever was sent meanwhile went unheard: look now
            self._stop.wait(RECONNECT_S)

    def _listen(self) -> None:
        import psycopg

        url = self._catalog.engine.url.set(drivername="postgresql")
        dsn = url.render_as_string(hide_password=False)
        with psycopg.connect(
            dsn, autocommit=True, application_name=APPLICATION_NAME, connect_timeout=10
        ) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self.listening.set()
            self.wake(None)  # anything committed before LISTEN is unheard
            while self._wanted():
                for note in conn.notifies(timeout=CHECK_S, stop_after=256):
                    self.wake(note.payload or None)


class _WakeAfterCommit:
    """The in-process half of :meth:`JobWakeups.notify`: run once the transaction committed."""

    def __init__(self, wakeups: JobWakeups, queues: set[str]) -> None:
        self.wakeups = wakeups
        self.queues = queues

    def __call__(self) -> None:
        for queue in sorted(self.queues):
            self.wakeups.wake(queue)


__all__ = ["APPLICATION_NAME", "CHANNEL", "JobWakeups"]
