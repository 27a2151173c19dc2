"""JobManager on a real PostgreSQL 18: enqueue (ON CONFLICT), claim from threads, caps,
backoff through a worker on an injected clock, cancel, lease recovery."""

from __future__ import annotations

import threading

import pytest

from knowbase.catalog.db import Catalog
from knowbase.clock import ManualClock as FakeClock
from knowbase.errors import ProviderUnavailable
from knowbase.jobs import Job, JobContext, JobKind, JobManager, Worker
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


def test_enqueue_joins_the_callers_transaction(manager: JobManager, catalog: Catalog) -> None:
    with pytest.raises(RuntimeError), catalog.write_tx() as conn:
        manager.enqueue(conn, KIND.name, {"a": 1}, queue="base.b1")
        raise RuntimeError("roll back")
    assert manager.list_jobs() == []
    with catalog.write_tx() as conn:
        job = manager.enqueue(conn, KIND.name, {"a": "ü"}, queue="base.b1", delay_s=2)
    got = manager.get(job.id)
    assert got == job
    assert (got.status, got.attempts, got.payload) == ("pending", 0, {"a": "ü"})
    assert got.run_at == job.created_at + 2000


def test_idempotency_dedupes_only_against_non_terminal(manager: JobManager, catalog) -> None:
    with catalog.write_tx() as conn:
        a = manager.enqueue(conn, KIND.name, {"n": 1}, queue="q", idempotency_key="k")
        # ON CONFLICT DO NOTHING: the collision does not abort this transaction.
        b = manager.enqueue(conn, KIND.name, {"n": 2}, queue="q", idempotency_key="k")
        c = manager.enqueue(conn, KIND.name, {}, queue="q", idempotency_key="other")
    assert a.id == b.id != c.id and b.payload == {"n": 1}
    (claimed,) = manager.claim("w1", queues=["q"])
    assert claimed.id == a.id
    assert manager.enqueue_now(KIND.name, {}, queue="q", idempotency_key="k").id == a.id
    assert manager.finish(claimed, "w1", Decision("completed")) is not None
    fresh = manager.enqueue_now(KIND.name, {"n": 3}, queue="q", idempotency_key="k")
    assert fresh.id != a.id and fresh.status == "pending"
    assert len(manager.list_jobs()) == 3


@pytest.mark.parametrize("first_commits", [True, False], ids=["commit", "rollback"])
def test_concurrent_enqueue_of_one_key(manager: JobManager, catalog, first_commits) -> None:
    """The second INSERT … ON CONFLICT waits on the first's uncommitted row: it then returns
    the winner's job, or inserts its own when the first rolled back."""
    first = catalog.engine.connect()
    tx = first.begin()
    mine = manager.enqueue(first, KIND.name, {"who": 1}, queue="q", idempotency_key="same")
    got: list[Job | BaseException] = []

    def second() -> None:
        try:
            got.append(
                manager.enqueue_now(KIND.name, {"who": 2}, queue="q", idempotency_key="same")
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
    assert [j.id for j in manager.list_jobs()] == [job.id]


def test_claim_is_atomic_across_threads(catalog: Catalog, clock: FakeClock) -> None:
    m = JobManager(catalog, clock=clock, queue_concurrency=1000, global_concurrency=1000)
    m.register(KIND, lambda ctx: None)
    with catalog.write_tx() as conn:
        for i in range(150):
            m.enqueue(conn, KIND.name, {"i": i}, queue=f"q{i % 3}")
    got: dict[str, list[str]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def run(worker: str) -> None:
        mine = got.setdefault(worker, [])
        try:
            start.wait()
            while batch := m.claim(worker, limit=3):
                mine.extend(j.id for j in batch)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"w{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    claimed = [i for ids in got.values() for i in ids]
    assert len(claimed) == len(set(claimed)) == 150
    rows = m.list_jobs(statuses=["running"])
    assert {j.id: j.locked_by for j in rows} == {i: w for w, ids in got.items() for i in ids}
    assert all(j.attempts == 1 for j in rows)


def test_caps_hold_under_concurrent_claims(catalog: Catalog, clock: FakeClock) -> None:
    m = JobManager(catalog, clock=clock, queue_concurrency=5, global_concurrency=7)
    m.register(KIND, lambda ctx: None)
    for _ in range(10):
        m.enqueue_now(KIND.name, {}, queue="base.one")
    for _ in range(3):
        m.enqueue_now(KIND.name, {}, queue="base.two")
    results: list[list[Job]] = []
    start = threading.Barrier(4)

    def run(worker: str) -> None:
        start.wait()
        results.append(m.claim(worker, limit=50))

    threads = [threading.Thread(target=run, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    running = m.list_jobs(statuses=["running"])
    assert len(running) == sum(len(r) for r in results) == 7  # global cap
    assert [j.queue for j in running].count("base.one") == 5  # per-queue cap
    done = next(j for j in running if j.queue == "base.one")
    m.finish(done, done.locked_by, Decision("completed"))
    (next_job,) = m.claim("w9", limit=50)
    assert next_job.queue == "base.one"


def test_backoff_series_then_failed(manager: JobManager, clock: FakeClock) -> None:
    calls: list[float] = []

    def flaky(ctx: JobContext) -> None:
        calls.append(clock())
        raise ProviderUnavailable("endpoint down")

    manager.register(JobKind("t.flaky", 3, 2, 60, 60, "abandon"), flaky)
    job = manager.enqueue_now("t.flaky", {}, queue="q")
    t0 = clock()
    w = Worker(manager, poll_s=0.02)
    w.run_until_idle(timeout_s=20)
    j = manager.get(job.id)
    assert (j.status, j.attempts, j.error_code) == ("pending", 1, "provider_unavailable")
    assert j.run_at == int((t0 + 2) * 1000)
    clock.advance(1.9)
    w.run_until_idle(timeout_s=20)
    assert manager.get(job.id).attempts == 1  # not due yet
    clock.advance(0.1)
    w.run_until_idle(timeout_s=20)
    j = manager.get(job.id)
    assert (j.status, j.attempts, j.run_at) == ("pending", 2, int((t0 + 2 + 4) * 1000))
    clock.advance(4)
    w.run_until_idle(timeout_s=20)
    j = manager.get(job.id)
    assert (j.status, j.attempts, j.error_code) == ("failed", 3, "provider_unavailable")
    assert [c - t0 for c in calls] == [0, 2, 6]


def test_finish_is_fenced_by_locked_by_and_attempts(manager: JobManager, clock) -> None:
    job = manager.enqueue_now(RETRY_KIND.name, {}, queue="q")
    (first,) = manager.claim("elsewhere:1:1")
    clock.advance(31)
    assert manager.recover().requeued == (job.id,)
    (second,) = manager.claim("w2")
    assert second.attempts == 2
    assert manager.finish(first, "elsewhere:1:1", Decision("completed")) is None
    assert manager.get(job.id).status == "running"
    assert manager.finish(second, "w2", Decision("completed")).status == "completed"


def test_cancel_pending_at_once_and_running_by_flag(manager: JobManager) -> None:
    running = manager.enqueue_now(KIND.name, {}, queue="q")
    manager.claim("w")
    pending = manager.enqueue_now(KIND.name, {}, queue="q", idempotency_key="p")
    manager.request_cancel([running.id, pending.id])
    p, r = manager.get(pending.id), manager.get(running.id)
    assert (p.status, p.error_code, p.finished_at is not None) == ("cancelled", "cancelled", True)
    assert (r.status, r.cancel_requested) == ("running", True)
    assert manager.settled == [(pending.id, "cancelled")]  # type: ignore[attr-defined]
    # The cancelled job released its key.
    assert manager.enqueue_now(KIND.name, {}, queue="q", idempotency_key="p").id != pending.id


def test_cooperative_cancel_of_a_running_job(manager: JobManager) -> None:
    started = threading.Event()

    def slow(ctx: JobContext) -> None:
        started.set()
        while not ctx.cancel_event.wait(0.02):
            pass
        ctx.check_cancelled()

    manager.register(JobKind("t.slow", 1, 1, 30, 60, "abandon"), slow)
    job = manager.enqueue_now("t.slow", {}, queue="q")
    with Worker(manager, poll_s=0.02):
        assert started.wait(10)
        manager.cancel_and_wait([job.id], timeout_s=20)
    j = manager.get(job.id)
    assert (j.status, j.error_code) == ("cancelled", "cancelled")


def test_lease_lapse_abandon_cancels_and_retry_requeues(manager, clock: FakeClock) -> None:
    ab = manager.enqueue_now(KIND.name, {}, queue="q", idempotency_key="a")
    re = manager.enqueue_now(RETRY_KIND.name, {}, queue="q", idempotency_key="r")
    untouched = manager.enqueue_now(RETRY_KIND.name, {}, queue="q")
    manager.claim("elsewhere:4242:1", limit=2)  # a remote host: only its lease tells
    clock.advance(29)
    assert manager.recover().count == 0
    clock.advance(2)
    report = manager.recover()
    assert (report.cancelled, report.requeued) == ((ab.id,), (re.id,))
    a, r, p = manager.get(ab.id), manager.get(re.id), manager.get(untouched.id)
    assert (a.status, a.error_code) == ("cancelled", "job_interrupted")
    assert (r.status, r.attempts, r.locked_by, r.lease_until) == ("pending", 1, None, None)
    assert p == untouched  # pending jobs are never recovered
    assert manager.settled == [(ab.id, "cancelled")]  # type: ignore[attr-defined]
    assert manager.enqueue_now(KIND.name, {}, queue="q", idempotency_key="a").id != ab.id
    assert manager.enqueue_now(RETRY_KIND.name, {}, queue="q", idempotency_key="r").id == re.id
    assert manager.recover().count == 0  # idempotent


def test_retry_policy_with_no_attempts_left_fails(manager: JobManager, clock) -> None:
    job = manager.enqueue_now(RETRY_KIND.name, {}, queue="q")
    for _ in range(3):
        manager.claim("elsewhere:1:1")
        clock.advance(31)
        manager.recover()
    j = manager.get(job.id)
    assert (j.status, j.attempts, j.error_code) == ("failed", 3, "job_interrupted")
