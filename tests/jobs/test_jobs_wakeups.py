"""Wake-ups on a SQLite catalog: an idle worker in this process claims a new job at once (the
catalog runs the wake-up after the commit), never before the commit, and never for a
transaction that rolled back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from knowbase.catalog.db import Catalog
from knowbase.jobs import JobKind, JobManager, Worker

pytestmark = pytest.mark.timeout(60)

KIND = JobKind("t.wake", 3, 1, 30, 60, "abandon")


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    cat = Catalog(f"sqlite:///{tmp_path}/catalog.sqlite")
    cat.create_schema()
    yield cat
    cat.dispose()


def test_idle_worker_claims_a_new_job_long_before_its_poll(catalog: Catalog) -> None:
    manager = JobManager(catalog, heartbeat_s=0.05)
    ran = threading.Event()
    manager.register(KIND, lambda ctx: ran.set())
    with Worker(manager, poll_s=30):  # only a wake-up can make this quick
        time.sleep(0.2)  # the loop is idle in its 30 s wait
        started = time.monotonic()
        manager.enqueuer.enqueue_now(KIND.name, {}, queue="q")
        assert ran.wait(5), "the enqueue did not wake the idle worker"
        assert time.monotonic() - started < 2


def test_wake_up_runs_after_the_commit_and_not_after_a_rollback(catalog: Catalog) -> None:
    manager = JobManager(catalog)
    manager.register(KIND, lambda ctx: None)
    seen: list[tuple[str | None, int]] = []

    def on_wake(queue: str | None) -> None:
        # What a worker's claim would find now (another connection, its own snapshot).
        seen.append((queue, len(manager.queries.list_jobs(queue="q"))))

    unsubscribe = manager.wakeups.subscribe(on_wake)
    try:
        with pytest.raises(RuntimeError), catalog.write_tx() as conn:
            manager.enqueuer.enqueue(conn, KIND.name, {}, queue="q")
            raise RuntimeError("roll back")
        with catalog.write_tx() as conn:  # the same pooled connection: no stale hook on it
            conn.exec_driver_sql("SELECT 1")
        assert seen == []
        with catalog.write_tx() as conn:
            manager.enqueuer.enqueue(conn, KIND.name, {}, queue="q")
            manager.enqueuer.enqueue(conn, KIND.name, {}, queue="q")
            assert seen == []  # not before the commit
        assert seen == [("q", 2)]  # once per queue and transaction, with both jobs visible
        manager.enqueuer.enqueue_now(KIND.name, {}, queue="q", delay_s=60)
        assert seen == [("q", 2)]  # a deferred job wakes nobody: the poll finds it when due
    finally:
        unsubscribe()
