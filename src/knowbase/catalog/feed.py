"""The change feed: wakes readers (the event stream) when catalog rows change, in any process.

Every write transaction that wrote a base, item or job row *publishes* once it commits: in this
process at once (a counter and a condition), and to other processes

- on PostgreSQL by ``NOTIFY knowbase_changes`` inside the transaction (delivered at commit),
  with the transaction's start time as payload, heard by one ``LISTEN`` connection per process;
- on SQLite by the file itself: one connection per process polls ``PRAGMA data_version``, which
  moves when another connection commits (no table is read), every ``SQLITE_POLL_S``.

Where to re-read from (:meth:`ChangeFeed.read_from`) follows from how each database orders
writers. SQLite has one writer at a time and rows are stamped under its lock, so a transaction
that was not yet visible stamps nothing below the highest ``updated_at`` a reader has seen: the
reader re-reads from that mark, less ``SQLITE_LAG_MS`` for small clock steps. PostgreSQL
transactions interleave, so a mark is not enough; each publication carries a *floor* (its
transaction's start: no row it wrote is stamped below it) and the reader re-reads from the
lowest floor since it last looked. Only when a floor is unknown (the LISTEN connection was
down) does it fall back to its mark less ``PG_LAG_MS``. Waking is cheap and may be spurious: a
reader that finds nothing new sends nothing.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

log = logging.getLogger(__name__)

CHANNEL = "knowbase_changes"
SQLITE_POLL_S = 0.25
SQLITE_LAG_MS = 2_000
PG_LAG_MS = 30_000  # a PostgreSQL transaction longer than this, during a LISTEN outage, is missed
PG_FALLBACK_S = 5.0  # how often the LISTEN loop checks for close; the retry delay
_HISTORY = 4096  # publications remembered for their floors


class FeedSource(Protocol):
    """What the feed reads of its catalog (:class:`~knowbase.catalog.db.Catalog`): which
    database it is and where, to watch other processes' commits. A protocol, so that the
    catalog, which owns a feed, is the only one of the two that imports the other."""

    is_sqlite: bool
    url: str
    engine: Engine


class ChangeFeed:
    """A counter of publications with their floors; thread-safe. One per ``Catalog``."""

    def __init__(self, catalog: FeedSource) -> None:
        self._catalog = catalog
        self._cond = threading.Condition()
        self._seq = 0
        self._floors: collections.deque[tuple[int, int | None]] = collections.deque(maxlen=_HISTORY)
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()
        #: Set once other processes' commits are watched (LISTEN is up, or SQLite polls).
        self.watching = threading.Event()

    @property
    def seq(self) -> int:
        """The number of publications so far (starts the cross-process watcher)."""
        self._ensure_watcher()
        with self._cond:
            return self._seq

    def publish(self, floor_ms: int | None = None) -> None:
        """Rows changed; none of them has ``updated_at < floor_ms`` (None: unknown)."""
        with self._cond:
            self._seq += 1
            self._floors.append((self._seq, floor_ms))
            self._cond.notify_all()

    def wait(self, seen: int, timeout_s: float) -> int:
        """Block until a publication after ``seen`` or ``timeout_s``; the current seq."""
        self._ensure_watcher()
        with self._cond:
            self._cond.wait_for(lambda: self._seq > seen, timeout_s)
            return self._seq

    def floor_since(self, seen: int) -> int | None:
        """The lowest floor of the publications after ``seen``; None when one had no floor,
        or they are too many to remember (then the reader's own lag applies)."""
        with self._cond:
            if self._seq == seen:
                return None
            floors = [f for s, f in self._floors if s > seen]
            if len(floors) < self._seq - seen or None in floors:
                return None
            return min(f for f in floors if f is not None)

    def read_from(self, seen: int, mark: int) -> int:
        """The ``updated_at`` a reader must re-read from: it has taken in the publications up
        to ``seen`` and rows stamped up to ``mark`` (see the module docstring)."""
        if self._catalog.is_sqlite:
            return mark - SQLITE_LAG_MS
        floor = self.floor_since(seen)
        return mark - PG_LAG_MS if floor is None else min(floor, mark)

    def close(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)

    # --- other processes -----------------------------------------------------------------
    def start(self) -> None:
        """Start watching other processes now (it also starts on first use)."""
        self._ensure_watcher()

    def _ensure_watcher(self) -> None:
        if self._watcher is not None or self._stop.is_set():
            return
        with self._cond:
            if self._watcher is not None:
                return
            target = self._watch_sqlite if self._catalog.is_sqlite else self._watch_postgres
            self._watcher = threading.Thread(target=target, name="kb-change-feed", daemon=True)
            self._watcher.start()

    def _watch_sqlite(self) -> None:
        import sqlite3

        path = self._catalog.url.split("///", 1)[1] if "///" in self._catalog.url else ""
        if not path or path == ":memory:":
            self.watching.set()
            return  # one process only: publish() reaches every reader
        from knowbase import sqlite_files

        sqlite_files.opening(path)
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        try:
            last = conn.execute("PRAGMA data_version").fetchone()[0]
            self.watching.set()
            while not self._stop.wait(SQLITE_POLL_S):
                try:
                    now = conn.execute("PRAGMA data_version").fetchone()[0]
                except sqlite3.Error:
                    continue  # a busy moment; the next poll will see it
                if now != last:
                    last = now
                    self.publish(None)
        finally:
            conn.close()

    def _watch_postgres(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except Exception as exc:  # the server went away: wake readers, try again
                self.watching.clear()
                log.warning("change feed LISTEN failed (%s); retrying", exc)
                self.publish(None)
                self._stop.wait(PG_FALLBACK_S)

    def _listen(self) -> None:
        import psycopg

        url = self._catalog.engine.url.set(drivername="postgresql")
        dsn = url.render_as_string(hide_password=False)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self.publish(None)  # anything before LISTEN is unseen: let readers catch up
            self.watching.set()
            while not self._stop.is_set():
                for note in conn.notifies(timeout=PG_FALLBACK_S, stop_after=256):
                    self.publish(int(note.payload) if note.payload.isdigit() else None)


__all__ = ["CHANNEL", "ChangeFeed"]
