"""A job whose completion rode in its handler's final transaction is never timed out after it.

DESIGN.md ("No work is done twice, and nothing says 'dropped' without a reason"): a lone import
logged "…ended after its attempt was superseded; dropped" for a job whose row said completed,
attempts 1, its own worker. The handler's transaction had completed the job
(``JobContext.complete_in``) when the worker's supervisor passed the attempt's deadline and ended
it with a timeout; settling that timeout then found the row already completed. Once a handler's
transaction carries the completion, the row decides: the supervisor leaves the attempt alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from knowbase.catalog.db import Catalog
from knowbase.clock import ManualClock
from knowbase.jobs import JobContext, JobKind, JobManager, Worker

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Catalog, JobManager, ManualClock]]:
    catalog = Catalog(f"sqlite:///{tmp_path}/catalog.sqlite")
    catalog.create_schema()
    clock = ManualClock()
    yield catalog, JobManager(catalog, clock=clock, heartbeat_s=0.05, cancel_grace_s=1), clock
    catalog.dispose()


def test_a_completed_transaction_is_not_timed_out_after_it(setup, caplog) -> None:  # type: ignore[no-untyped-def]
    catalog, manager, clock = setup
    committed, leave = threading.Event(), threading.Event()

    def handler(ctx: JobContext) -> None:
        with catalog.write_tx() as conn:
            assert ctx.complete_in(conn, chunks=1)
        committed.set()
        leave.wait(20)  # what follows the commit (closing files, notifying) outlasts the deadline

    manager.register(JobKind("t.commits", 1, 1, 30, 5, "abandon"), handler)
    job = manager.enqueuer.enqueue_now("t.commits", {}, queue="q")
    caplog.set_level(logging.INFO, logger="knowbase")
    with Worker(manager, poll_s=0.02):
        assert committed.wait(10)
        clock.advance(6)  # past the 5 s timeout while the handler is still returning
        time.sleep(0.3)  # several supervisor passes
        leave.set()
        deadline = time.monotonic() + 10
        while "completed in" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
    row = manager.queries.get(job.id)
    assert (row.status, row.attempts, row.error_code) == ("completed", 1, None)
    assert "superseded" not in caplog.text and "job_timeout" not in caplog.text
    assert "t.commits" in caplog.text and "completed in" in caplog.text
