"""Helpers every item handler shares: load the live item, fail it when its job settles badly."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.jobs.model import Job
from knowbase.jobs.retry import JOB_INTERRUPTED, error_code_of, error_message_of
from knowbase.runtime import Runtime

log = logging.getLogger(__name__)


def live_item(rt: Runtime, payload: dict) -> tuple[Base, Item] | None:
    """The base and item of a job, or None when either is gone or the item is ``deleting``."""
    with rt.catalog.read() as conn:
        base = base_repo.find(conn, payload["base_id"])
        item = item_repo.find(conn, payload["item_id"]) if base else None
    if base is None or item is None or item.status == "deleting":
        return None
    return base, item


def set_item_status(rt: Runtime, item_id: str, status: str) -> bool:
    with rt.catalog.write_tx() as conn:
        return item_repo.set_status(conn, item_id, status)


def iso_now(clock: Callable[[], float]) -> str:
    return datetime.fromtimestamp(clock(), UTC).isoformat().replace("+00:00", "Z")


def failure_of(
    status: str, error: BaseException | None, job_code: str | None = None
) -> tuple[str, str]:
    """(code, message) an item gets when its job ends ``failed`` or ``cancelled``;
    ``job_code``: the job's own ``error_code`` (``job_interrupted`` after the recovery sweep
    released its last attempt)."""
    if status == "cancelled":
        return "indexing_interrupted", "Indexing was interrupted (job cancelled or abandoned)"
    if error is None and job_code == JOB_INTERRUPTED:
        return (
            "indexing_interrupted",
            "Indexing was interrupted on every attempt (the process running it stopped each"
            " time): run `kb retry` once the cause is fixed",
        )
    if error is None:
        code, message = "job_failed", ""
    else:
        # The job's own code: a KnowbaseError's, or internal_error for a bug (a KeyError…).
        code, message = error_code_of(error), error_message_of(error).strip()
    # An item keeps only a code and a message: fold the hint in so the user learns the fix
    # ("enable OCR…", "remove the password…").
    hint = getattr(error, "hint", None)
    if message and hint and hint not in message:
        message = f"{message.rstrip('.')}: {hint}"
    return code, message or f"Job {status}"


def make_item_on_settled(rt: Runtime) -> Callable[[Job, str, BaseException | None], None]:
    """on_settled for prepare-root / index-documents / process-file: fail the live item."""

    def on_settled(job: Job, status: str, error: BaseException | None) -> None:
        item_id = job.payload.get("item_id")
        if not item_id:
            return
        code, message = failure_of(status, error, job.error_code)
        with rt.catalog.write_tx() as conn:
            item = item_repo.find(conn, item_id)
            if item is None or item.status == "deleting":
                return
            if item.is_container and status == "cancelled":
                # The whole expansion was interrupted: its active rows can never finish now.
                rows = item_repo.subtree(conn, [item_id])
                active = [r.id for r in rows if r.status not in ("completed", "failed")]
                item_repo.fail_items(conn, active, code, message)
            item_repo.set_status(conn, item_id, "failed", error_code=code, error_message=message)

    return on_settled
