"""What one attempt's end means for its job: a pure function of the error and the attempts.

The wait before the next attempt doubles from ``base_delay_s`` and is capped at
``max_delay_s``. For ``knowledge.prepare-root`` (3 attempts, 2 s, 60 s) the series is
2 s, 4 s (then the third attempt's failure is final); with more attempts it would continue
8, 16, 32, 60, 60, … s. For index-documents (1 s, 30 s): 1, 2, 4, 8, 16, 30, 30, … s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from knowbase.errors import KnowbaseError, Unavailable
from knowbase.jobs.model import Cancelled, JobKind

Status = Literal["completed", "failed", "cancelled", "pending"]

#: error_code of an attempt that ran past its kind's ``timeout_s``.
JOB_TIMEOUT = "job_timeout"
#: error_code of a cancelled job.
JOB_CANCELLED = "cancelled"
#: error_code of a running job recovered after its worker vanished.
JOB_INTERRUPTED = "job_interrupted"
#: error_code of an exception that is not a KnowbaseError.
INTERNAL_ERROR = "internal_error"


class JobTimeout(Exception):  # noqa: N818 - names the outcome
    """Stands for the error of an attempt that the worker stopped waiting for."""


@dataclass(frozen=True)
class Decision:
    """The new state of a job after one attempt ended."""

    status: Status
    error_code: str | None = None
    error_message: str | None = None
    delay_s: float = 0.0  # only for ``pending``: run again no earlier than now + delay_s


def retry_delay_s(kind: JobKind, attempt: int) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based).

    ``base * 2 ** (attempt - 1)`` capped at ``max``: with base 2 s, max 60 s the series is
    2, 4, 8, 16, 32, 60, 60, … s.

    >>> retry_delay_s(JobKind("k", 5, 2, 60, 10, "abandon"), 3)
    8.0
    """
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    # Cap the exponent first: 2 ** 10_000 would overflow a float.
    return float(min(kind.base_delay_s * 2 ** min(attempt - 1, 64), kind.max_delay_s))


def is_transient(exc: BaseException) -> bool:
    """Only transient errors are retried: Unavailable (incl. ProviderUnavailable), timeouts and
    anything that is not one of ours. Every other KnowbaseError (ItemFailed, InvalidInput,
    ProviderError…) ends the job at once."""
    if isinstance(exc, Unavailable):
        return True
    return not isinstance(exc, KnowbaseError)


def error_code_of(exc: BaseException) -> str:
    if isinstance(exc, JobTimeout):
        return JOB_TIMEOUT
    if isinstance(exc, KnowbaseError):
        return exc.code
    return INTERNAL_ERROR


def error_message_of(exc: BaseException) -> str:
    if isinstance(exc, KnowbaseError):
        return exc.message or exc.code
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def decide(
    kind: JobKind, attempts: int, exc: BaseException | None, *, cancel_requested: bool = False
) -> Decision:
    """The outcome of attempt number ``attempts`` that ended with ``exc`` (None: it returned).

    returned → completed; ``Cancelled``, or any error while a cancel was requested → cancelled;
    a non-transient error → failed; a transient one → pending after ``retry_delay_s`` while
    attempts remain, else failed.
    """
    if exc is None:
        return Decision("completed")
    if isinstance(exc, Cancelled) or cancel_requested:
        return Decision("cancelled", JOB_CANCELLED, str(exc) or "cancel requested")
    code, message = error_code_of(exc), error_message_of(exc)
    if is_transient(exc) and attempts < kind.max_attempts:
        return Decision("pending", code, message, retry_delay_s(kind, attempts))
    return Decision("failed", code, message)


__all__ = [
    "INTERNAL_ERROR",
    "JOB_CANCELLED",
    "JOB_INTERRUPTED",
    "JOB_TIMEOUT",
    "Decision",
    "JobTimeout",
    "decide",
    "is_transient",
    "retry_delay_s",
]
