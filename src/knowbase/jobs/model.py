"""Job value objects: the kind a handler is registered under, and one job row.

A :class:`Job` is a frozen snapshot of a ``job`` row; it never changes under the caller. Read a
fresh one with ``JobQueries.get``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from knowbase.catalog.schema import JOB_STATUSES, TERMINAL_JOB_STATUSES

Recovery = Literal["abandon", "retry"]

__all__ = [
    "JOB_STATUSES",
    "TERMINAL_JOB_STATUSES",
    "Cancelled",
    "Job",
    "JobKind",
    "Recovery",
]


class Cancelled(Exception):  # noqa: N818 - the name reads as the outcome it causes
    """Raised inside a handler by ``ctx.check_cancelled()`` once a cancel was requested."""


@dataclass(frozen=True)
class JobKind:
    """A kind of job and its policy.

    ``max_attempts`` counts every attempt (the first one included); the wait before attempt
    ``n + 1`` is ``retry_delay_s(kind, n)``. ``timeout_s`` bounds one attempt. ``recovery`` says
    what happens to a running job whose worker vanished: ``abandon`` → cancelled, ``retry`` →
    pending again.

    Example: ``JobKind("knowledge.delete-subtree", 3, 2.0, 60.0, 600.0, "retry")``.
    """

    name: str
    max_attempts: int
    base_delay_s: float
    max_delay_s: float
    timeout_s: float
    recovery: Recovery

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"{self.name}: max_attempts must be >= 1")
        if self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ValueError(f"{self.name}: need 0 <= base_delay_s <= max_delay_s")
        if self.timeout_s <= 0:
            raise ValueError(f"{self.name}: timeout_s must be > 0")
        if self.recovery not in ("abandon", "retry"):
            raise ValueError(f"{self.name}: recovery must be 'abandon' or 'retry'")


def _json_obj(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {"value": value}


@dataclass(frozen=True)
class Job:
    """One row of the ``job`` table. Timestamps are integer milliseconds since the epoch."""

    id: str
    kind: str
    queue: str
    payload: dict[str, Any]
    status: str
    idempotency_key: str | None
    parent_id: str | None
    attempts: int
    max_attempts: int
    run_at: int
    locked_by: str | None
    lease_until: int | None
    cancel_requested: bool
    progress_stage: str | None
    progress_percent: float | None
    progress_details: dict[str, Any] = field(default_factory=dict)
    error_code: str | None = None
    error_message: str | None = None
    created_at: int = 0
    updated_at: int = 0
    finished_at: int | None = None
    by_key: str | None = None  # who asked for it (jobs/actor.py)
    by_surface: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> Job:
        """Build from a SQLAlchemy row (or any mapping with the table's column names)."""
        m: Mapping[str, Any] = row._mapping if hasattr(row, "_mapping") else row
        return cls(
            id=m["id"],
            kind=m["kind"],
            queue=m["queue"],
            payload=_json_obj(m["payload"]),
            status=m["status"],
            idempotency_key=m["idempotency_key"],
            parent_id=m["parent_id"],
            attempts=int(m["attempts"]),
            max_attempts=int(m["max_attempts"]),
            run_at=int(m["run_at"]),
            locked_by=m["locked_by"],
            lease_until=None if m["lease_until"] is None else int(m["lease_until"]),
            cancel_requested=bool(m["cancel_requested"]),
            progress_stage=m["progress_stage"],
            progress_percent=m["progress_percent"],
            progress_details=_json_obj(m["progress_details"]),
            error_code=m["error_code"],
            error_message=m["error_message"],
            created_at=int(m["created_at"]),
            updated_at=int(m["updated_at"]),
            finished_at=None if m["finished_at"] is None else int(m["finished_at"]),
            by_key=m.get("by_key"),
            by_surface=m.get("by_surface"),
        )

    @property
    def base_id(self) -> str | None:
        """The base whose queue (``base.<id>``) the job runs on; None for a home-wide job."""
        return self.queue.removeprefix("base.") if self.queue.startswith("base.") else None

    @property
    def is_terminal(self) -> bool:
        """Completed, failed or cancelled: nothing will run it again."""
        return self.status in TERMINAL_JOB_STATUSES

    @property
    def call_string(self) -> str:
        """A short name for log lines: ``kind[id]#attempt``."""
        return f"{self.kind}[{self.id}]#{self.attempts}"
