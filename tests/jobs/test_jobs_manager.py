"""JobManager on every catalog backend (``backend_catalog``: SQLite, PostgreSQL): enqueue,
idempotency, claim, caps, cancel, fencing."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from knowbase.catalog.db import Catalog
from knowbase.clock import ManualClock as FakeClock
from knowbase.errors import KnowbaseError, Unavailable
from knowbase.jobs.context import JobContext
from knowbase.jobs.manager import JobManager
from knowbase.jobs.model import Job, JobKind
from knowbase.jobs.retry import Decision

pytestmark = pytest.mark.timeout(60)

KIND = JobKind("test.echo", 3, 1, 30, 600, "abandon")
RETRY_KIND = JobKind("test.retry", 3, 2, 60, 600, "retry")


@pytest.fixture
def catalog(backend_catalog: Catalog) -> Catalog:
    return backend_catalog


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def manager(catalog: Catalog, clock: FakeClock) -> JobManager:
    m = JobManager(catalog, clock=clock)
    settled: list[tuple[str, str, BaseException | None]] = []
    m.settled = settled  # type: ignore[attr-defined]

    def on_settled(job: Job, status: str, exc: BaseException | None) -> None:
        settled.append((job.id, status, exc))

    m.register(KIND, lambda ctx: None, on_settled=on_settled)
    m.register(RETRY_KIND, lambda ctx: None, on_settled=on_settled)
    return m


def test_enqueue_joins_the_callers_transaction(manager: JobManager, catalog: Catalog) -> None:
    with pytest.raises(RuntimeError), catalog.write_tx() as conn:
        manager.enqueuer.enqueue(conn, KIND.name, {"a": 1}, queue="base.b1")
        raise RuntimeError("roll back")
    assert manager.queries.list_jobs() == []
    with catalog.write_tx() as conn:
        job = manager.enqueuer.enqueue(conn, KIND.name, {"a": 1}, queue="base.b1", delay_s=2)
    got = manager.queries.get(job.id)
    assert got == job
    assert (got.status, got.attempts, got.max_attempts, got.payload) == ("pending", 0, 3, {"a": 1})
    assert got.run_at == job.created_at + 2000


def test_unknown_kind_is_refused(manager: JobManager) -> None:
    with pytest.raises(KnowbaseError, match="not registered"):
        manager.enqueuer.enqueue_now("test.nope", {}, queue="q")


def test_idempotency_dedupes_only_against_non_terminal(manager: JobManager) -> None:
    first = manager.enqueuer.enqueue_now(KIND.name, {"n": 1}, queue="q", idempotency_key="k")
    again = manager.enqueuer.enqueue_now(KIND.name, {"n": 2}, queue="q", idempotency_key="k")
    assert again.id == first.id and again.payload == {"n": 1}
    # Running still blocks a duplicate.
    (claimed,) = manager.claims.claim("w1")
    assert (
        manager.enqueuer.enqueue_now(KIND.name, {}, queue="q", idempotency_key="k").id == first.id
    )
    assert manager.attempts.finish(claimed, "w1", Decision("completed")) is not None
    fresh = manager.enqueuer.enqueue_now(KIND.name, {"n": 3}, queue="q", idempotency_key="k")
    assert fresh.id != first.id and fresh.status == "pending"
    manager.cancels.request_cancel([fresh.id])
    third = manager.enqueuer.enqueue_now(KIND.name, {}, queue="q", idempotency_key="k")
    assert third.id not in (first.id, fresh.id)
    assert len(manager.queries.list_jobs()) == 3


def test_dedupe_inside_one_transaction_keeps_it_usable(manager: JobManager, catalog) -> None:
    with catalog.write_tx() as conn:
        a = manager.enqueuer.enqueue(conn, KIND.name, {}, queue="q", idempotency_key="same")
        b = manager.enqueuer.enqueue(conn, KIND.name, {}, queue="q", idempotency_key="same")
        c = manager.enqueuer.enqueue(conn, KIND.name, {}, queue="q", idempotency_key="other")
    assert a.id == b.id != c.id
    assert {j.id for j in manager.queries.list_jobs()} == {a.id, c.id}


def test_enqueue_many_is_one_insert_that_skips_keys_held_by_live_jobs(
    manager: JobManager, catalog: Catalog
) -> None:
    held = manager.enqueuer.enqueue_now(KIND.name, {"n": 0}, queue="q", idempotency_key="k0")
    with pytest.raises(RuntimeError), catalog.write_tx() as conn:  # it joins the caller's tx
        manager.enqueuer.enqueue_many(conn, KIND.name, [({"n": 9}, "k9")], queue="q")
        raise RuntimeError("roll back")
    with catalog.write_tx() as conn:
        manager.enqueuer.enqueue_many(
            conn,
            KIND.name,
            [({"n": 0}, "k0"), ({"n": 1}, "k1"), ({"n": 2}, None), ({"n": 3}, "k3")],
            queue="q",
            parent_id=held.id,
        )
    jobs = {j.payload["n"]: j for j in manager.queries.list_jobs()}
    assert sorted(jobs) == [0, 1, 2, 3]
    assert jobs[0].id == held.id  # the live key kept its job; no duplicate row
    assert {jobs[n].parent_id for n in (1, 2, 3)} == {held.id}
    assert {(j.status, j.attempts, j.max_attempts) for j in jobs.values()} == {("pending", 0, 3)}
    claimed = manager.claims.claim("w1", limit=10)
    assert [j.payload["n"] for j in claimed] == [0, 1, 2, 3]  # FIFO, as enqueued


def test_claim_only_due_jobs_and_backoff_clock(manager: JobManager, clock: FakeClock) -> None:
    later = manager.enqueuer.enqueue_now(KIND.name, {}, queue="q", delay_s=5)
    now = manager.enqueuer.enqueue_now(KIND.name, {}, queue="q")
    assert [j.id for j in manager.claims.claim("w", limit=10)] == [now.id]
    clock.advance(5)
    (job,) = manager.claims.claim("w", limit=10)
    assert job.id == later.id
    assert (job.status, job.attempts, job.locked_by) == ("running", 1, "w")
    assert job.lease_until == int(clock() * 1000) + 30_000


def test_claim_respects_queue_filter_and_fifo(manager: JobManager) -> None:
    ids = [manager.enqueuer.enqueue_now(KIND.name, {"i": i}, queue="a").id for i in range(3)]
    manager.enqueuer.enqueue_now(KIND.name, {}, queue="b")
    assert [j.id for j in manager.claims.claim("w", queues=["a"], limit=10)] == ids


def test_claim_skips_kinds_this_process_does_not_run(catalog: Catalog, clock) -> None:
    enqueuer = JobManager(catalog, clock=clock)
    enqueuer.register(JobKind("other.kind", 1, 1, 1, 1, "abandon"), lambda ctx: None)
    enqueuer.enqueuer.enqueue_now("other.kind", {}, queue="q")
    runner = JobManager(catalog, clock=clock)
    runner.register(KIND, lambda ctx: None)
    assert runner.claims.claim("w", limit=5) == []


def test_per_queue_and_global_caps(catalog: Catalog, clock: FakeClock) -> None:
    m = JobManager(catalog, clock=clock, global_concurrency=7)
    m.register(KIND, lambda ctx: None)
    for _ in range(10):
        m.enqueuer.enqueue_now(KIND.name, {}, queue="base.one")
    for _ in range(3):
        m.enqueuer.enqueue_now(KIND.name, {}, queue="base.two")
    first = m.claims.claim("w1", limit=50)
    assert sorted(j.queue for j in first).count("base.one") == 5
    assert len(first) == 7  # global cap: 5 from one + 2 from two
    assert m.claims.claim("w2", limit=50) == []
    done = next(j for j in first if j.queue == "base.one")
    m.attempts.finish(done, "w1", Decision("completed"))
    (next_job,) = m.claims.claim("w2", limit=50)
    assert next_job.queue == "base.one"  # oldest due job first; base.one has one free slot


def test_claim_is_atomic_across_threads(catalog: Catalog, clock: FakeClock) -> None:
    m = JobManager(catalog, clock=clock, queue_concurrency=1000, global_concurrency=1000)
    m.register(KIND, lambda ctx: None)
    with catalog.write_tx() as conn:
        for i in range(120):
            m.enqueuer.enqueue(conn, KIND.name, {"i": i}, queue=f"q{i % 3}")
    got: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def run(worker: str) -> None:
        mine = got.setdefault(worker, [])
        try:
            while batch := m.claims.claim(worker, limit=3):
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
    assert len(claimed) == len(set(claimed)) == 120
    rows = m.queries.list_jobs(statuses=["running"])
    assert {j.id: j.locked_by for j in rows} == {i: w for w, ids in got.items() for i in ids}


def test_finish_is_fenced_by_locked_by_and_attempts(manager: JobManager, clock) -> None:
    job = manager.enqueuer.enqueue_now(RETRY_KIND.name, {}, queue="q")
    (a1,) = manager.claims.claim("A")
    clock.advance(31)  # A stalls past its lease
    report = manager.leases.recover()
    assert report.requeued == (job.id,)
    (a2,) = manager.claims.claim("B")
    assert a2.attempts == 2
    assert manager.attempts.finish(a1, "A", Decision("completed")) is None
    assert manager.attempts.finish(a2, "A", Decision("completed")) is None  # wrong worker
    ctx_a = JobContext(a1, manager, "A")
    assert not ctx_a.is_current_attempt()
    assert JobContext(a2, manager, "B").is_current_attempt()
    ctx_a.progress("late", 99)  # a late writer changes nothing
    now = manager.queries.get(job.id)
    assert (now.status, now.locked_by, now.progress_stage) == ("running", "B", None)
    done = manager.attempts.finish(a2, "B", Decision("completed"))
    assert done is not None and done.status == "completed" and done.finished_at is not None


def test_is_current_attempt_inside_the_callers_transaction(manager, catalog) -> None:
    manager.enqueuer.enqueue_now(KIND.name, {}, queue="q")
    (job,) = manager.claims.claim("w")
    ctx = JobContext(job, manager, "w")
    with catalog.write_tx() as conn:
        assert ctx.is_current_attempt(conn)


def test_cancel_pending_at_once_and_running_by_flag(manager: JobManager) -> None:
    running = manager.enqueuer.enqueue_now(KIND.name, {}, queue="q")
    manager.claims.claim("w")
    pending = manager.enqueuer.enqueue_now(KIND.name, {}, queue="q", idempotency_key="p")
    manager.cancels.request_cancel([running.id, pending.id, "no-such-id"])
    p, r = manager.queries.get(pending.id), manager.queries.get(running.id)
    assert (p.status, p.idempotency_key) == ("cancelled", "p")
    assert (r.status, r.cancel_requested) == ("running", True)
    assert manager.settled == [(pending.id, "cancelled", None)]  # type: ignore[attr-defined]


def test_a_cancel_requested_while_an_attempt_ran_wins_over_its_retry(
    manager: JobManager, clock: FakeClock
) -> None:
    """Issue 37: an attempt that ended with a transient error (a full disk) after a cancel was
    requested went back to the queue, cancel flag and all, to wait for a worker; a worker
    stopping released a cancel-requested job by the snapshot it claimed, requeueing it too."""
    job = manager.enqueuer.enqueue_now(RETRY_KIND.name, {}, queue="q", idempotency_key="r")
    (claimed,) = manager.claims.claim("w")
    manager.cancels.request_cancel([job.id])
    after = manager.attempts.finish(claimed, "w", Decision("pending", "disk_full", "full", 2.0))
    assert after is not None
    assert (after.status, after.error_code, after.finished_at is not None) == (
        "cancelled",
        "cancelled",
        True,
    )
    assert manager.settled == [(job.id, "cancelled", None)]  # type: ignore[attr-defined]
    # Without a cancel the retry stands.
    other = manager.enqueuer.enqueue_now(RETRY_KIND.name, {}, queue="q", idempotency_key="s")
    (claimed,) = manager.claims.claim("w")
    after = manager.attempts.finish(claimed, "w", Decision("pending", "disk_full", "full", 2.0))
    assert after is not None and after.status == "pending"
    # A stopping worker releases by the row's flag, not by what it claimed.
    clock.advance(3)
    (claimed,) = manager.claims.claim("w")
    assert claimed.id == other.id and not claimed.cancel_requested
    manager.cancels.request_cancel([other.id])
    released = manager.leases.release(claimed, "w", "worker stopped")
    assert released is not None and released.status == "cancelled"


def test_cancel_of_pending_calls_on_settled(manager: JobManager) -> None:
    job = manager.enqueuer.enqueue_now(KIND.name, {}, queue="q", idempotency_key="k")
    manager.cancels.request_cancel([job.id])
    got = manager.queries.get(job.id)
    assert (got.status, got.error_code, got.finished_at is not None) == (
        "cancelled",
        "cancelled",
        True,
    )
    assert manager.settled == [(job.id, "cancelled", None)]  # type: ignore[attr-defined]
    # terminal: nothing happens, on_settled not called again
    manager.cancels.request_cancel([job.id])
    assert len(manager.settled) == 1  # type: ignore[attr-defined]


def test_on_settled_errors_are_swallowed(catalog: Catalog, clock) -> None:
    m = JobManager(catalog, clock=clock)

    def boom(job: Job, status: str, exc: BaseException | None) -> None:
        raise RuntimeError("callback bug")

    m.register(KIND, lambda ctx: None, on_settled=boom)
    job = m.enqueuer.enqueue_now(KIND.name, {}, queue="q")
    m.cancels.request_cancel([job.id])
    assert m.queries.get(job.id).status == "cancelled"


def test_cancel_and_wait_times_out_on_a_stuck_running_job(manager: JobManager) -> None:
    job = manager.enqueuer.enqueue_now(KIND.name, {}, queue="q")
    manager.claims.claim(manager.worker_id)  # "running" in this live process, lease valid
    with pytest.raises(Unavailable) as info:
        manager.cancels.cancel_and_wait([job.id], timeout_s=0.3)
    assert info.value.details["job_ids"] == [job.id]


def test_wait_for_returns_terminal_jobs_in_order(manager: JobManager) -> None:
    a = manager.enqueuer.enqueue_now(KIND.name, {}, queue="q")
    b = manager.enqueuer.enqueue_now(KIND.name, {}, queue="q")
    manager.cancels.request_cancel([b.id, a.id])
    assert [j.id for j in manager.queries.wait_for([b.id, a.id], timeout_s=1)] == [b.id, a.id]
    c = manager.enqueuer.enqueue_now(KIND.name, {}, queue="q")
    with pytest.raises(Unavailable):
        manager.queries.wait_for([c.id], timeout_s=0.2, poll_s=0.05)


def test_parent_children_and_listing(manager: JobManager) -> None:
    parent = manager.enqueuer.enqueue_now(KIND.name, {}, queue="base.x")
    kids = [
        manager.enqueuer.enqueue_now(RETRY_KIND.name, {"i": i}, queue="base.x", parent_id=parent.id)
        for i in range(3)
    ]
    manager.enqueuer.enqueue_now(KIND.name, {}, queue="base.y")
    assert [j.id for j in manager.queries.children(parent.id)] == [k.id for k in kids]
    assert len(manager.queries.list_jobs(queue="base.x")) == 4
    assert len(manager.queries.list_jobs(kind_prefix="test.ret")) == 3
    assert manager.queries.list_jobs(kind_prefix="test_") == []  # '_' is not a wildcard
    assert len(manager.queries.list_jobs(statuses=["pending"], limit=2)) == 2


def test_progress_is_throttled_and_readable(manager: JobManager, catalog, clock) -> None:
    manager.enqueuer.enqueue_now(KIND.name, {}, queue="q")
    (job,) = manager.claims.claim("w")
    ctx = JobContext(job, manager, "w")
    updates: list[str] = []

    def count(conn, cursor, statement, *args) -> None:  # noqa: ANN001
        if statement.startswith("UPDATE job SET progress_stage"):
            updates.append(statement)

    sa.event.listen(catalog.engine, "before_cursor_execute", count)
    try:
        for i in range(50):
            ctx.progress("reading", i, done=i)
        assert len(updates) == 1
        got = manager.queries.get(job.id)
        assert (got.progress_stage, got.progress_percent, got.progress_details) == (
            "reading",
            0.0,
            {"done": 0},
        )
        clock.advance(1.0)
        ctx.progress("embedding", 80)
        assert len(updates) == 2 and manager.queries.get(job.id).progress_stage == "embedding"
        ctx.progress("embedding", 90, chunks=7)
        assert manager.queries.get(job.id).progress_percent == 80
    finally:
        sa.event.remove(catalog.engine, "before_cursor_execute", count)
    # The last value is written with the end of the attempt.
    done = manager.attempts.finish(
        job, "w", Decision("completed"), progress=ctx.take_pending_progress()
    )
    assert (done.progress_percent, done.progress_details) == (90, {"chunks": 7})
