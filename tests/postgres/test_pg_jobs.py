"""JobManager on PostgreSQL 18, what needs its concurrency: enqueue races (ON CONFLICT), caps
under concurrent claims, lease recovery. The queue's contract and the worker run on every
backend in ``tests/jobs/test_jobs_manager.py`` and ``tests/jobs/test_jobs_worker.py``."""

from __future__ import annotations

import threading

import pytest

from knowbase.catalog.db import Catalog
from knowbase.clock import ManualClock as FakeClock
from knowbase.jobs import Job, JobKind, JobManager
from knowbase.jobs.retry import Decision

pytestmark = pytest.mark.timeout(60)

KIND = JobKind("test.echo", 3, 1, 30, 600, "abandon")
RETRY_KIND = JobKind("test.retry", 3, 1, 30, 600, "retry")


@pytest.fixture
def catalog(pg_url: str):
    cat = Catalog(pg_url)
    yield cat
    cat.dispose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def manager(catalog: Catalog, clock: FakeClock) -> JobManager:
    m = JobManager(catalog, clock=clock, heartbeat_s=0.05, cancel_grace_s=1)
    settled: list[tuple[str, str]] = []
    m.settled = settled  # type: ignore[attr-defined]

    def on_settled(job: Job, status: str, exc: BaseException | None) -> None:
        settled.append((job.id, status))

    m.register(KIND, lambda ctx: None, on_settled=on_settled)
    m.register(RETRY_KIND, lambda ctx: None, on_settled=on_settled)
    return m


@pytest.mark.parametrize("first_commits", [True, False], ids=["commit", "rollback"])
def test_concurrent_enqueue_of_one_key(manager: JobManager, catalog, first_commits) -> None:
    """The second INSERT … ON CONFLICT waits on the first's uncommitted row: it then returns
    the winner's job, or inserts its own when the first rolled back."""
    first = catalog.engine.connect()
    tx = first.begin()
    mine = manager.enqueuer.enqueue(first, KIND.name, {"who": 1}, queue="q", idempotency_key="same")
    got: list[Job | BaseException] = []

    def second() -> None:
        try:
            got.append(
                manager.enqueuer.enqueue_now(
                    KIND.name, {"who": 2}, queue="q", idempotency_key="same"
                )
            )
        except BaseException as exc:  # pragma: no cover - reported below
            got.append(exc)

    t = threading.Thread(target=second)
    t.start()
    t.join(0.5)
    assert got == []  # blocked on the unique index
    tx.commit() if first_commits else tx.rollback()
    first.close()
    t.join(10)
    (job,) = got
    assert isinstance(job, Job)
    if first_commits:
        assert job.id == mine.id and job.payload == {"who": 1}
    else:
        assert job.id != mine.id and job.payload == {"who": 2}
    assert [j.id for j in manager.queries.list_jobs()] == [job.id]


def test_caps_hold_under_concurrent_claims(catalog: Catalog, clock: FakeClock) -> None:
    m = JobManager(catalog, clock=clock, queue_concurrency=5, global_concurrency=7)
    m.register(KIND, lambda ctx: None)
    for _ in range(10):
        m.enqueuer.enqueue_now(KIND.name, {}, queue="base.one")
    for _ in range(3):
        m.enqueuer.enqueue_now(KIND.name, {}, queue="base.two")
    results: list[list[Job]] = []
    start = threading.Barrier(4)

    def run(worker: str) -> None:
        start.wait()
        results.append(m.claims.claim(worker, limit=50))

    threads = [threading.Thread(target=run, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    running = m.queries.list_jobs(statuses=["running"])
    assert len(running) == sum(len(r) for r in results) == 7  # global cap
    assert [j.queue for j in running].count("base.one") == 5  # per-queue cap
    done = next(j for j in running if j.queue == "base.one")
    m.attempts.finish(done, done.locked_by, Decision("completed"))
    (next_job,) = m.claims.claim("w9", limit=50)
    assert next_job.queue == "base.one"


def test_lease_lapse_abandon_cancels_and_retry_requeues(manager, clock: FakeClock) -> None:
    ab = manager.enqueuer.enqueue_now(KIND.name, {}, queue="q", idempotency_key="a")
    re = manager.enqueuer.enqueue_now(RETRY_KIND.name, {}, queue="q", idempotency_key="r")
    untouched = manager.enqueuer.enqueue_now(RETRY_KIND.name, {}, queue="q")
    manager.claims.claim("elsewhere:4242:1", limit=2)  # a remote host: only its lease tells
    clock.advance(29)
    assert manager.leases.recover().count == 0
    clock.advance(2)
    report = manager.leases.recover()
    assert (report.cancelled, report.requeued) == ((ab.id,), (re.id,))
    a, r, p = (
        manager.queries.get(ab.id),
        manager.queries.get(re.id),
        manager.queries.get(untouched.id),
    )
    assert (a.status, a.error_code) == ("cancelled", "job_interrupted")
    assert (r.status, r.attempts, r.locked_by, r.lease_until) == ("pending", 1, None, None)
    assert p == untouched  # pending jobs are never recovered
    assert manager.settled == [(ab.id, "cancelled")]  # type: ignore[attr-defined]
    assert manager.enqueuer.enqueue_now(KIND.name, {}, queue="q", idempotency_key="a").id != ab.id
    assert (
        manager.enqueuer.enqueue_now(RETRY_KIND.name, {}, queue="q", idempotency_key="r").id
        == re.id
    )
    assert manager.leases.recover().count == 0  # idempotent


def test_retry_policy_with_no_attempts_left_fails(manager: JobManager, clock) -> None:
    job = manager.enqueuer.enqueue_now(RETRY_KIND.name, {}, queue="q")
    for _ in range(3):
        manager.claims.claim("elsewhere:1:1")
        clock.advance(31)
        manager.leases.recover()
    j = manager.queries.get(job.id)
    assert (j.status, j.attempts, j.error_code) == ("failed", 3, "job_interrupted")
