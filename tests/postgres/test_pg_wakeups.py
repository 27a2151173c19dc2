"""LISTEN/NOTIFY wake-ups on a real PostgreSQL 18: an enqueue in another "process" (a second
Catalog + JobManager, its own engine) wakes an idle worker long before its poll, only once the
enqueue committed; a finished job wakes a worker held back by the queue cap; a dropped LISTEN
connection is re-established and wakes its workers meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from knowbase.catalog.db import Catalog
from knowbase.jobs import JobKind, JobManager, Worker
from knowbase.jobs.wakeups import APPLICATION_NAME
from waiting import wait_until

pytestmark = pytest.mark.timeout(90)

KIND = JobKind("t.wake", 3, 1, 30, 60, "abandon")
SLOW = JobKind("t.slow", 3, 1, 30, 60, "abandon")
POLL_S = 30  # far above every bound below: only a wake-up can be that quick


@pytest.fixture
def catalogs(pg_url: str) -> Iterator[tuple[Catalog, Catalog]]:
    """This process's catalog and another process's (writes reach us only through the server)."""
    ours, theirs = Catalog(pg_url), Catalog(pg_url)
    yield ours, theirs
    ours.dispose()
    theirs.dispose()


def listening_worker(manager: JobManager, **kw) -> Worker:
    worker = Worker(manager, poll_s=POLL_S, **kw)
    worker.start()
    assert manager.wakeups.listening.wait(20), "LISTEN never started"
    time.sleep(0.2)  # the claim loop is idle in its long wait now
    return worker


def test_enqueue_elsewhere_wakes_an_idle_worker_after_the_commit(catalogs) -> None:
    ours, theirs = catalogs
    manager, sender = JobManager(ours, heartbeat_s=0.05), JobManager(theirs)
    ran = threading.Event()
    manager.register(KIND, lambda ctx: ran.set())
    sender.register(KIND, lambda ctx: None)
    worker = listening_worker(manager)
    try:
        with theirs.write_tx() as conn:
            sender.enqueuer.enqueue(conn, KIND.name, {}, queue="q")
            # A wake-up sent before the commit would find nothing, and the next look would
            # come only after POLL_S: the job would not run in time below.
            time.sleep(0.5)
            assert not ran.is_set()
            committed = time.monotonic()
        assert ran.wait(5), "the NOTIFY did not wake the idle worker"
        assert time.monotonic() - committed < 2
    finally:
        worker.stop()


def test_a_finished_job_wakes_a_worker_held_back_by_the_queue_cap(catalogs) -> None:
    ours, theirs = catalogs
    release, ran = threading.Event(), threading.Event()
    # Each kind has one worker that knows it; one running job per queue in all.
    slow = JobManager(theirs, heartbeat_s=0.05, queue_concurrency=1)
    slow.register(SLOW, lambda ctx: release.wait(10))
    fast = JobManager(ours, heartbeat_s=0.05, queue_concurrency=1)
    fast.register(KIND, lambda ctx: ran.set())
    workers = [listening_worker(slow), listening_worker(fast)]
    try:
        slow.enqueuer.enqueue_now(SLOW.name, {}, queue="q")
        wait_until(lambda: slow.queries.count_jobs(queue="q", statuses=["running"]) == 1)
        fast.enqueuer.enqueue_now(KIND.name, {}, queue="q")
        time.sleep(0.3)
        assert not ran.is_set()  # the cap holds it back
        freed = time.monotonic()
        release.set()
        assert ran.wait(5), "the freed slot did not wake the capped worker"
        assert time.monotonic() - freed < 2
    finally:
        for w in workers:
            w.stop()


def test_a_dropped_listen_connection_comes_back(catalogs, pg_server) -> None:
    ours, theirs = catalogs
    manager, sender = JobManager(ours, heartbeat_s=0.05), JobManager(theirs)
    ran = threading.Event()
    manager.register(KIND, lambda ctx: ran.set())
    sender.register(KIND, lambda ctx: None)
    worker = listening_worker(manager)
    woken: list[str | None] = []
    unsubscribe = manager.wakeups.subscribe(woken.append)
    try:
        assert worker.poll_s == POLL_S

        def listeners() -> list[int]:
            with theirs.read() as conn:
                return list(
                    conn.execute(
                        sa.text(
                            "SELECT pid FROM pg_stat_activity WHERE application_name = :a"
                            " AND datname = current_database()"
                        ),
                        {"a": APPLICATION_NAME},
                    ).scalars()
                )

        (old,) = listeners()
        with theirs.write_tx() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": old})
        wait_until(lambda: None in woken)  # the drop woke its workers: they look at once
        wait_until(lambda: len(listeners()) == 1 and listeners()[0] != old)
        assert manager.wakeups.listening.wait(10)
        time.sleep(0.2)
        sent = time.monotonic()
        sender.enqueuer.enqueue_now(KIND.name, {}, queue="q")
        assert ran.wait(5), "no wake-up after the reconnect"
        assert time.monotonic() - sent < 2
    finally:
        worker.stop()
        unsubscribe()
    wait_until(lambda: listeners() == [])  # the listener leaves with its last subscriber
