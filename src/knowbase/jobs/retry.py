"""What one attempt's end means for its job: a pure function of the error and the attempts.

The wait before the next attempt doubles from ``base_delay_s`` and is capped at
``max_delay_s``. For ``knowledge.prepare-root`` (3 attempts, 2 s, 60 s) the series is
2 s, 4 s (then the third attempt's failure is final); with more attempts it would continue
8, 16, 32, 60, 60, … s. For index-documents (1 s, 30 s): 1, 2, 4, 8, 16, 30, 30, … s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from knowbase.diskspace import as_disk_full, is_disk_full
from knowbase.errors import KnowbaseError, Unavailable
from knowbase.jobs.model import Cancelled, JobKind

Status = Literal["completed", "failed", "cancelled", "pending"]

#: error_code of an attempt that ran past its kind's ``timeout_s``.
JOB_TIMEOUT = "job_timeout"
#: error_code of a cancelled job.
JOB_CANCELLED = "cancelled"
#: error_code of a running job recovered after its worker vanished.
JOB_INTERRUPTED = "job_interrupted"
#: error_code of an exception that is a bug: not ours, and not transient.
INTERNAL_ERROR = "internal_error"
#: error_code of a transient library error (I/O, network, busy database) once retries ran out.
TRANSIENT_ERROR = "transient_error"


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


#: OSErrors that say the request itself is wrong: retrying cannot change the answer.
PERMANENT_OS_ERRORS: tuple[type[OSError], ...] = (
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)
#: Words of a database driver's message that mean "busy, try again" (SQLite, PostgreSQL).
_BUSY_WORDS = ("locked", "busy")


def _is_busy_database(exc: BaseException) -> bool:
    """sqlite3/apsw busy or locked; a SQLAlchemy error wrapping one, a dropped connection, a
    PostgreSQL serialization failure, deadlock or lock timeout; a pool that timed out."""
    import sqlite3

    import sqlalchemy.exc as sa_exc

    from knowbase.errors import DatabaseBusy, DatabaseIOError

    if isinstance(exc, DatabaseBusy | DatabaseIOError):  # named faults: busy, or I/O to retry
        return True
    if isinstance(exc, sa_exc.TimeoutError):  # the connection pool is exhausted
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        return exc.orig is not None and exc.orig is not exc and _is_busy_database(exc.orig)
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        return any(word in text for word in _BUSY_WORDS)
    module = type(exc).__module__ or ""
    if module.startswith("apsw"):
        return type(exc).__name__ in ("BusyError", "LockedError", "IOError")
    if module.startswith("psycopg"):
        # 40001 serialization_failure, 40P01 deadlock_detected, 55P03 lock_not_available;
        # class 08: the connection went away.
        state = getattr(exc, "sqlstate", None) or ""
        return state in ("40001", "40P01", "55P03") or state.startswith("08")
    return False


def _is_transient_http(exc: BaseException) -> bool:
    """httpx transport errors (connect, read, timeouts) and answers 429 or 5xx."""
    module = type(exc).__module__ or ""
    if not module.startswith("httpx"):
        return False
    import httpx

    if isinstance(exc, httpx.TransportError):
        return True
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        return status == 429 or status >= 500
    return False


def is_transient(exc: BaseException) -> bool:
    """Whether a later attempt may succeed where this one failed; only these are retried.

    Transient: ``Unavailable`` (incl. ``ProviderUnavailable``, which providers raise for 429 and
    5xx), an attempt that ran past its timeout (``JobTimeout``, ``TimeoutError``), I/O and
    network errors (``OSError`` other than :data:`PERMANENT_OS_ERRORS` — a missing file or a
    denied permission stays so, a full disk or a reset connection may not), a busy or locked
    database, and httpx transport errors or 429/5xx answers that reached us unmapped.

    Not transient, so the job fails at once: every other ``KnowbaseError`` (``ItemFailed``,
    ``InvalidInput``, ``ProviderError``…) and any other exception — a ``KeyError`` or
    ``TypeError`` is a bug, and running it again only delays the report (``internal_error``,
    logged with its traceback).
    """
    if isinstance(exc, KnowbaseError):
        return isinstance(exc, Unavailable)
    if is_disk_full(exc):  # space may come back (sqlite3 reports it as an OperationalError)
        return True
    if isinstance(exc, (JobTimeout, TimeoutError)):
        return True
    if isinstance(exc, OSError):
        return not isinstance(exc, PERMANENT_OS_ERRORS)
    return _is_busy_database(exc) or _is_transient_http(exc)


def error_code_of(exc: BaseException) -> str:
    """The job's ``error_code``: the error's own code, ``job_timeout``, ``disk_full`` for a
    full disk whatever reported it, ``transient_error`` for another transient error of a
    library (OSError, a busy database…), else ``internal_error``."""
    if isinstance(exc, JobTimeout):
        return JOB_TIMEOUT
    if isinstance(exc, KnowbaseError):
        return exc.code
    if is_disk_full(exc):
        return as_disk_full(exc).code
    if is_transient(exc):
        return TRANSIENT_ERROR
    return INTERNAL_ERROR


def error_message_of(exc: BaseException) -> str:
    if isinstance(exc, KnowbaseError):
        return exc.message or exc.code
    if is_disk_full(exc):
        full = as_disk_full(exc)
        return f"{full.message}: {full.hint}"
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
    "PERMANENT_OS_ERRORS",
    "TRANSIENT_ERROR",
    "Decision",
    "JobTimeout",
    "decide",
    "error_code_of",
    "is_transient",
    "retry_delay_s",
]
