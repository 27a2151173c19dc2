"""Durable jobs on the catalog: kinds, the manager, the worker (DESIGN "Processes, jobs and
locks"; origin-spec §5)."""

from knowbase.jobs.context import JobContext
from knowbase.jobs.manager import Handler, JobManager, OnSettled, RecoveryReport
from knowbase.jobs.model import Cancelled, Job, JobKind
from knowbase.jobs.retry import retry_delay_s
from knowbase.jobs.worker import Worker, live_workers

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
