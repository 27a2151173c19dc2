"""Durable jobs on the catalog: kinds, the manager, the worker (DESIGN "Processes, jobs and
locks"; origin-spec §5).

The names below load on first use: a process that only reads a base (``kb search``) imports
``knowbase.jobs.model`` for a type and nothing of the queue engine (issue 39 item 5).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knowbase.jobs.context import JobContext
    from knowbase.jobs.manager import Handler, JobManager, OnSettled, RecoveryReport
    from knowbase.jobs.model import Cancelled, Job, JobKind
    from knowbase.jobs.retry import retry_delay_s
    from knowbase.jobs.worker import Worker, live_workers

_WHERE = {
    "JobContext": "context",
    "Handler": "manager",
    "JobManager": "manager",
    "OnSettled": "manager",
    "RecoveryReport": "manager",
    "Cancelled": "model",
    "Job": "model",
    "JobKind": "model",
    "retry_delay_s": "retry",
    "Worker": "worker",
    "live_workers": "worker",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'knowbase.jobs' has no attribute {name!r}")
    return getattr(import_module(f"knowbase.jobs.{_WHERE[name]}"), name)


__all__ = [
    "Cancelled",
    "Handler",
    "Job",
    "JobContext",
    "JobKind",
    "JobManager",
    "OnSettled",
    "RecoveryReport",
    "Worker",
    "live_workers",
    "retry_delay_s",
]
