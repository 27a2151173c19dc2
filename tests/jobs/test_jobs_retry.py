"""The retry policy is a pure function of the error and the attempts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowbase.errors import (
    Conflict,
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
    assert is_transient(RuntimeError("x"))
    assert is_transient(Unavailable("down"))
    assert is_transient(ProviderUnavailable("down"))
    assert is_transient(JobTimeout("late"))
    for exc in (ItemFailed("bad"), NoTextExtracted("scan"), InvalidInput("x"), Conflict("x")):
        assert not is_transient(exc)
    assert not is_transient(ProviderError("garbage"))


def test_decide_outcomes() -> None:
    assert decide(PREPARE, 1, None).status == "completed"
    d = decide(PREPARE, 1, RuntimeError("boom"))
    assert (d.status, d.error_code, d.delay_s) == ("pending", "internal_error", 2)
    assert "RuntimeError: boom" in (d.error_message or "")
    d = decide(PREPARE, 2, ProviderUnavailable("503"))
    assert (d.status, d.error_code, d.delay_s) == ("pending", "provider_unavailable", 4)
    assert decide(PREPARE, 3, RuntimeError("boom")).status == "failed"
    d = decide(PREPARE, 1, NoTextExtracted("scanned"))
    assert (d.status, d.error_code) == ("failed", "no_text_extracted")
    assert decide(PREPARE, 1, Cancelled()).status == "cancelled"
    # Any error while a cancel was requested reads as the cancel it most likely is.
    assert decide(PREPARE, 1, RuntimeError("x"), cancel_requested=True).status == "cancelled"
    d = decide(PREPARE, 1, JobTimeout("late"))
    assert (d.status, d.error_code) == ("pending", "job_timeout")
    assert decide(PREPARE, 3, JobTimeout("late")).error_code == "job_timeout"


def test_kind_validates_its_policy() -> None:
    with pytest.raises(ValueError):
        JobKind("k", 0, 1, 2, 3, "retry")
    with pytest.raises(ValueError):
        JobKind("k", 1, 5, 2, 3, "retry")
    with pytest.raises(ValueError):
        JobKind("k", 1, 1, 2, 3, "explode")  # type: ignore[arg-type]


def test_spec_kind_table() -> None:
    from knowbase.runtime import queue_of
    from knowbase.tasks.kinds import ALL_KINDS, DELETE_SUBTREE, PROCESS_FILE

    assert [k for k in ALL_KINDS if k.recovery == "retry"] == [DELETE_SUBTREE]
    assert (PROCESS_FILE.max_attempts, PROCESS_FILE.timeout_s) == (2, 1800)
    assert len({k.name for k in ALL_KINDS}) == len(ALL_KINDS)
    assert queue_of("b1") == "base.b1"
