"""The retry policy is a pure function of the error and the attempts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowbase.errors import (
    Conflict,
    DiskFull,
    InvalidInput,
    ItemFailed,
    NoTextExtracted,
    ProviderError,
    ProviderUnavailable,
    Unavailable,
)
from knowbase.jobs.model import Cancelled, JobKind
from knowbase.jobs.retry import JobTimeout, decide, is_transient, retry_delay_s

PREPARE = JobKind("knowledge.prepare-root", 3, 2, 60, 600, "abandon")
INDEX = JobKind("knowledge.index-documents", 3, 1, 30, 1800, "abandon")


def test_series_doubles_then_caps() -> None:
    assert [retry_delay_s(PREPARE, n) for n in range(1, 9)] == [2, 4, 8, 16, 32, 60, 60, 60]
    assert [retry_delay_s(INDEX, n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


def test_huge_attempt_numbers_do_not_overflow() -> None:
    assert retry_delay_s(PREPARE, 100_000) == 60


def test_attempt_is_one_based() -> None:
    with pytest.raises(ValueError):
        retry_delay_s(PREPARE, 0)


@given(
    base=st.floats(0, 100),
    extra=st.floats(0, 1000),
    n=st.integers(1, 200),
)
def test_delay_is_monotone_and_bounded(base: float, extra: float, n: int) -> None:
    kind = JobKind("k", 5, base, base + extra, 1, "retry")
    d1, d2 = retry_delay_s(kind, n), retry_delay_s(kind, n + 1)
    assert base <= d1 <= d2 <= base + extra
    assert retry_delay_s(kind, 1) == base


def test_only_transient_errors_retry() -> None:
    assert is_transient(Unavailable("down"))
    assert is_transient(ProviderUnavailable("down"))
    assert is_transient(JobTimeout("late"))
    for exc in (ItemFailed("bad"), NoTextExtracted("scan"), InvalidInput("x"), Conflict("x")):
        assert not is_transient(exc)
    assert not is_transient(ProviderError("garbage"))


@pytest.mark.parametrize(
    "exc",
    [KeyError("k"), TypeError("t"), RuntimeError("r"), ValueError("v"), AttributeError("a")],
)
def test_programming_errors_are_not_transient(exc: BaseException) -> None:
    assert not is_transient(exc)
    d = decide(PREPARE, 1, exc)
    assert (d.status, d.error_code) == ("failed", "internal_error")


def test_io_network_and_timeouts_are_transient() -> None:
    import errno

    for exc in (
        OSError(errno.EIO, "I/O error"),
        ConnectionResetError("reset"),
        TimeoutError("slow"),
        BrokenPipeError(),
    ):
        assert is_transient(exc), exc
        d = decide(PREPARE, 1, exc)
        assert (d.status, d.error_code) == ("pending", "transient_error")
    # A full disk, whoever reports it, is transient and says so (issue 26).
    import sqlite3

    import sqlalchemy.exc as sa_exc

    full = sqlite3.OperationalError("database or disk is full")
    for exc in (
        OSError(errno.ENOSPC, "No space left on device", "/home/kb/raw/a.md"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
        full,
        sa_exc.OperationalError("INSERT …", {}, full),
    ):
        assert is_transient(exc), exc
        d = decide(PREPARE, 1, exc)
        assert (d.status, d.error_code) == ("pending", "disk_full"), exc
        assert "free space" in (d.error_message or "")
        last = decide(PREPARE, PREPARE.max_attempts, exc)
        assert (last.status, last.error_code) == ("failed", "disk_full")
    for exc in (
        FileNotFoundError("gone"),
        PermissionError("no"),
        IsADirectoryError("dir"),
        NotADirectoryError("x"),
        FileExistsError("x"),
    ):
        assert not is_transient(exc), exc
        assert decide(PREPARE, 1, exc).error_code == "internal_error"


def test_a_busy_database_is_transient(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Real lock contention on a real SQLite file, through sqlite3, SQLAlchemy and apsw."""
    import sqlite3

    import sqlalchemy as sa

    path = tmp_path / "busy.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    try:
        waiter = sqlite3.connect(path, timeout=0, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError) as raw:
            waiter.execute("BEGIN IMMEDIATE")
        assert is_transient(raw.value)
        engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
        with pytest.raises(sa.exc.OperationalError) as wrapped, engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))
        assert is_transient(wrapped.value)
        engine.dispose()
        waiter.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # apsw bundles its own SQLite: its locks are only seen by another apsw connection (POSIX
    # locks are per process, and each library copy keeps its own table of them).
    apsw = pytest.importorskip("apsw")
    first, second = apsw.Connection(str(path)), apsw.Connection(str(path))
    first.execute("BEGIN IMMEDIATE")
    second.set_busy_timeout(0)
    with pytest.raises(apsw.BusyError) as busy:
        second.execute("BEGIN IMMEDIATE")
    assert is_transient(busy.value)
    first.execute("ROLLBACK")
    first.close()
    second.close()
    # Other database errors are bugs (a missing table is not going to appear).
    with pytest.raises(sqlite3.OperationalError) as missing:
        sqlite3.connect(path).execute("SELECT * FROM nowhere")
    assert not is_transient(missing.value)


def test_http_transport_errors_and_5xx_are_transient() -> None:
    import httpx

    request = httpx.Request("GET", "http://example.invalid/")
    assert is_transient(httpx.ConnectError("refused", request=request))
    assert is_transient(httpx.ReadTimeout("slow", request=request))
    for status, transient in ((429, True), (503, True), (500, True), (404, False), (400, False)):
        response = httpx.Response(status, request=request)
        exc = httpx.HTTPStatusError("status", request=request, response=response)
        assert is_transient(exc) is transient, status


def test_decide_outcomes() -> None:
    assert decide(PREPARE, 1, None).status == "completed"
    d = decide(PREPARE, 1, RuntimeError("boom"))
    assert (d.status, d.error_code) == ("failed", "internal_error")
    assert "RuntimeError: boom" in (d.error_message or "")
    d = decide(PREPARE, 2, ProviderUnavailable("503"))
    assert (d.status, d.error_code, d.delay_s) == ("pending", "provider_unavailable", 4)
    d = decide(PREPARE, 1, ConnectionResetError("reset"))
    assert (d.status, d.error_code, d.delay_s) == ("pending", "transient_error", 2)
    assert decide(PREPARE, 3, ConnectionResetError("reset")).status == "failed"
    d = decide(PREPARE, 1, NoTextExtracted("scanned"))
    assert (d.status, d.error_code) == ("failed", "no_text_extracted")
    assert decide(PREPARE, 1, Cancelled()).status == "cancelled"
    # Any error while a cancel was requested reads as the cancel it most likely is.
    assert decide(PREPARE, 1, RuntimeError("x"), cancel_requested=True).status == "cancelled"
    d = decide(PREPARE, 1, JobTimeout("late"))
    assert (d.status, d.error_code) == ("pending", "job_timeout")
    assert decide(PREPARE, 3, JobTimeout("late")).error_code == "job_timeout"


def test_an_error_its_handler_made_final_fails_the_job_at_once() -> None:
    """A folder import stopped by a full disk takes its rows back and fails whole (issue 37):
    a retry two seconds later would meet the same disk, with no `kb add` left waiting."""
    assert decide(PREPARE, 1, DiskFull("full")).status == "pending"
    d = decide(PREPARE, 1, DiskFull("full", final=True))
    assert (d.status, d.error_code) == ("failed", "disk_full")


def test_kind_validates_its_policy() -> None:
    with pytest.raises(ValueError):
        JobKind("k", 0, 1, 2, 3, "retry")
    with pytest.raises(ValueError):
        JobKind("k", 1, 5, 2, 3, "retry")
    with pytest.raises(ValueError):
        JobKind("k", 1, 1, 2, 3, "explode")  # type: ignore[arg-type]


def test_spec_kind_table() -> None:
    from knowbase.operations.kinds import ALL_KINDS, PROCESS_FILE, SYNC_BASE
    from knowbase.runtime import queue_of

    # A model switch resumes after a crash (its shadow vectors are kept): issue 15 item 4; so
    # does an item's job (issue 26: interrupted work resumes). Only a sync is re-planned.
    assert [k for k in ALL_KINDS if k.recovery == "abandon"] == [SYNC_BASE]
    assert (PROCESS_FILE.max_attempts, PROCESS_FILE.timeout_s) == (2, 1800)
    assert len({k.name for k in ALL_KINDS}) == len(ALL_KINDS)
    assert queue_of("b1") == "base.b1"
