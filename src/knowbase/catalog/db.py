"""Catalog engine: SQLite (default) or PostgreSQL, with explicit write transactions.

pysqlite opens a transaction only at the first write, so check-then-write steps would race
across processes. Following SQLAlchemy's pysqlite recipe we put the driver in autocommit and emit
``BEGIN IMMEDIATE`` ourselves in :meth:`Catalog.write_tx` (``BEGIN`` for reads).

SQLite has one writer at a time, and a writer that finds the lock taken polls it through the
busy handler, sleeping 1, 2, 5 … 100 ms between tries. Threads of one process therefore queue
on a lock of ours first and hand the write lock on at once; only other processes still poll.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from knowbase import sqlite_files
from knowbase.catalog.feed import CHANNEL, ChangeFeed
from knowbase.catalog.schema import metadata
from knowbase.diskspace import as_disk_full, is_disk_full
from knowbase.errors import CatalogUnavailable, DatabaseIOError, DiskFull, KnowbaseError
from knowbase.sqlite_faults import fault_error, kind_of


def now_ms() -> int:
    return int(time.time() * 1000)


def unindexed(column: sa.ColumnElement) -> sa.ColumnElement:  # type: ignore[type-arg]
    """``column`` as an expression no index serves, for a status test beside ``id IN (...)``.

    Without statistics SQLite guesses that an equality on any indexed column matches ~10 rows,
    so for ``id IN (64 ids) AND status IN (...)`` it walked the status index -- every pending
    row of a 100k-file import, 28 ms a statement -- instead of the 64 primary-key lookups.
    PostgreSQL plans by its statistics and takes the key either way."""
    return column.concat("")


#: Tables whose writes the change feed publishes (what a stream shows: bases, items, jobs).
FEED_TABLES = frozenset({"knowledge_base", "knowledge_item", "job"})
# A heartbeat renews leases every few seconds; no reader shows a lease, so it wakes nobody.
_LEASE_ONLY = re.compile(r"UPDATE job SET lease_until=\S+ WHERE ")


def _feed_table(statement: str) -> str | None:
    """The table an INSERT/UPDATE/DELETE writes, or None for anything else."""
    words = statement.split(None, 3)
    verb = words[0].upper() if words else ""
    if verb == "UPDATE" and len(words) > 1:
        return words[1]
    if verb in ("INSERT", "DELETE") and len(words) > 2:
        return words[2]
    return None


def _track_writes(engine: Engine) -> None:
    """Flag a connection that wrote a :data:`FEED_TABLES` row, for the change feed."""

    @sa.event.listens_for(engine, "before_cursor_execute")
    def _on_execute(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if _feed_table(statement) in FEED_TABLES and not _LEASE_ONLY.match(statement):
            conn.info["kb_wrote"] = True


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @sa.event.listens_for(engine, "do_connect")
        def _announce(_dialect, _record, _cargs, _cparams):  # type: ignore[no-untyped-def]
            if path and path != ":memory:":
                sqlite_files.opening(path)  # before the connection: see knowbase.sqlite_files

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _on_begin(conn):  # type: ignore[no-untyped-def]
            mode = conn.info.pop("begin_mode", "DEFERRED")
            conn.exec_driver_sql(f"BEGIN {mode}")

        return engine
    return sa.create_engine(url, pool_pre_ping=True)


#: How often a running process asks SQLite for a ``PRAGMA quick_check`` of its catalog (on a
#: readiness poll; O(pages), so not on every one).
QUICK_CHECK_EVERY_S = 600.0


class Catalog:
    """Owns the catalog engine. ``write_tx`` for writes, ``read`` for consistent reads."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = _make_engine(url)
        self.is_sqlite = url.startswith("sqlite")
        #: Why the catalog cannot be used, found when it was opened (:meth:`create_schema`).
        self.problem: CatalogUnavailable | None = None
        _track_writes(self.engine)
        self.feed = ChangeFeed(self)
        # re-entrant: a nested write_tx (another pooled connection) then fails with SQLite's
        # "database is locked" after the busy timeout, as it always did, instead of hanging.
        # PostgreSQL has row locks and real waits: nothing to queue for.
        self._writer_queue: AbstractContextManager[object] = (
            threading.RLock() if self.is_sqlite else nullcontext()
        )
        # The last scheduled quick_check: when, and what it found (None: whole).
        self._integrity: tuple[float, CatalogUnavailable | None] | None = None

    @property
    def sqlite_path(self) -> Path | None:
        """The catalog's file on an embedded home; None on PostgreSQL or in memory."""
        path = self.url.split("///", 1)[1] if self.is_sqlite and "///" in self.url else ""
        return Path(path) if path and path != ":memory:" else None

    def create_schema(self, *, bases_dir: Path | None = None) -> None:
        """Bring the schema to head with Alembic (idempotent).

        With ``bases_dir`` an embedded catalog is checked first (:mod:`.integrity`): a damaged
        file, or an empty or missing one while base folders exist, raises CatalogUnavailable,
        and every later :meth:`read` / :meth:`write_tx` raises it too (:attr:`problem`)
        instead of writing a new, empty catalog.
        """
        from knowbase.catalog.migrate import upgrade_to_head

        path = self.sqlite_path
        if path is None:
            upgrade_to_head(self.engine)
            return
        # Processes that open one new home at once (``kb serve --processes``: N API processes
        # and a worker) take turns: two migrations on one SQLite file fail "database is
        # locked", and a check that sees another's half-made file would call it damaged.
        from filelock import FileLock

        with FileLock(str(path.with_name(path.name + ".migrate.lock"))):
            if bases_dir is not None:
                from knowbase.catalog.integrity import check_sqlite_catalog

                self.problem = check_sqlite_catalog(path, bases_dir)
                if self.problem is not None:
                    raise self.problem
            upgrade_to_head(self.engine)

    def check(self, bases_dir: Path) -> None:
        """Raise when the catalog is unusable now (``/status`` and ``kb status`` call it): the
        reason found at open, else what SQLite answers over a pooled connection, with a
        ``PRAGMA quick_check`` every :data:`QUICK_CHECK_EVERY_S`. The file itself is never
        opened outside SQLite here (:mod:`knowbase.sqlite_files`)."""
        if self.problem is not None:
            raise self.problem
        path = self.sqlite_path
        if path is None:
            return
        from knowbase.catalog.integrity import base_folders, query_problem, recovery_hint

        due = self._integrity is None or time.monotonic() - self._integrity[0] > QUICK_CHECK_EVERY_S
        has_folders = bool(base_folders(bases_dir))
        # A fresh connection, not a pooled one: a pooled connection's page cache can hide a file
        # changed under this process. A second connection of the same SQLite library is safe
        # (SQLite keeps its descriptors while any lock of this process is held on the file).
        sqlite_files.opening(path)
        gone = sqlite_files.header_problem(path)  # stat only, now: missing or empty
        if gone is not None:
            raise CatalogUnavailable(
                f"the catalog {path} {gone}; it is not recreated empty",
                hint=recovery_hint(path),
                path=str(path),
            )
        try:
            raw = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=5)
        except sqlite3.Error as exc:
            raise self._fault(sa.exc.DBAPIError(None, None, exc)) or exc from exc
        try:
            found = query_problem(raw, path, has_folders, thorough=True, quick_check=due)
        finally:
            raw.close()
        if isinstance(found, KnowbaseError):
            raise found
        problem = None
        if found is not None:
            problem = CatalogUnavailable(
                f"the catalog {path} {found}", hint=recovery_hint(path), path=str(path)
            )
        if due:
            self._integrity = (time.monotonic(), problem if found and "damaged" in found else None)
        if problem is None and self._integrity is not None:
            problem = self._integrity[1]  # a failed quick_check stands until the next one
        if problem is not None:
            raise problem

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        """Turn SQLite's faults into named errors: busy, I/O, full disk and cannot-open as such
        (:mod:`knowbase.sqlite_faults`), corruption only when an integrity check on a fresh
        connection agrees (CatalogUnavailable, 503 with the reason). After any fault the pool's
        connections are reopened. Other database errors pass unchanged."""
        if self.problem is not None:
            raise self.problem
        try:
            yield
        except sa.exc.DBAPIError as exc:
            problem = self._fault(exc)
            if problem is None:
                raise
            raise problem from exc

    def _fault(self, exc: sa.exc.DBAPIError) -> KnowbaseError | None:
        path = self.sqlite_path
        code = getattr(exc.orig, "sqlite_errorcode", None)
        kind = kind_of(code)
        if path is None or kind is None:
            return None
        # Whatever it was, the next use starts on fresh connections (a handle that saw an I/O
        # error can keep failing where a new one works).
        self.engine.dispose()
        name = getattr(exc.orig, "sqlite_errorname", None) or f"code {code}"
        detail = f"{exc.orig} [{name}]"
        if kind != "corrupt":
            return fault_error(kind, path, detail, "catalog")
        from knowbase.catalog.integrity import integrity_problem, recovery_hint

        try:
            with self.engine.connect() as conn:
                damaged = integrity_problem(conn.connection.dbapi_connection)
        except sa.exc.DBAPIError as again:  # not even a fresh connection can read it
            damaged = (
                f"is damaged ({again.orig})"
                if kind_of(getattr(again.orig, "sqlite_errorcode", None)) == "corrupt"
                else None
            )
            if damaged is None:
                return fault_error("io", path, f"{again.orig}", "catalog")
        if damaged is not None:
            return CatalogUnavailable(
                f"the catalog {path} {damaged}", hint=recovery_hint(path), path=str(path)
            )
        return DatabaseIOError(
            f"SQLite reported the catalog ({path}) damaged ({detail}), but its integrity check "
            "passes: the connections were reopened; retry",
            transient=True,
            path=str(path),
        )

    @contextmanager
    def write_tx(self) -> Iterator[Connection]:
        """A write transaction: ``BEGIN IMMEDIATE`` on SQLite, so check-then-write is atomic.

        When it wrote a base, item or job row it publishes on :attr:`feed` after the commit
        (on PostgreSQL also a ``NOTIFY`` that other processes hear at commit). Callables a
        statement appended to ``conn.info["kb_after_commit"]`` run after the commit.

        A write that fails for lack of space raises :class:`~knowbase.errors.DiskFull`."""
        try:
            with self._write_tx() as conn:
                yield conn
        except DiskFull:
            raise
        except Exception as exc:
            if is_disk_full(exc):
                raise as_disk_full(exc) from exc
            raise

    @contextmanager
    def _write_tx(self) -> Iterator[Connection]:
        with self._mapped(), self._writer_queue, self.engine.connect() as conn:
            if self.is_sqlite:
                conn.info["begin_mode"] = "IMMEDIATE"
            # Callables to run once this transaction committed (the job queue's in-process
            # wake-ups); a rolled-back transaction's hooks never run, nor reach the next user.
            conn.info["kb_after_commit"] = []
            with conn.begin():
                conn.info["kb_wrote"] = False
                # After BEGIN: on SQLite the write lock is ours, so every row this
                # transaction stamps is at or after ``started``.
                started = now_ms()
                yield conn
                wrote = conn.info.pop("kb_wrote", False)
                if wrote and not self.is_sqlite:
                    conn.execute(
                        sa.text("SELECT pg_notify(:channel, :floor)"),
                        {"channel": CHANNEL, "floor": str(started)},
                    )
            after_commit = conn.info.pop("kb_after_commit", [])
        if wrote:
            self.feed.publish(started)
        for hook in after_commit:
            hook()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction (one snapshot)."""
        with self._mapped(), self.engine.connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        self.feed.close()
        self.engine.dispose()


__all__ = ["Catalog", "metadata", "now_ms"]
