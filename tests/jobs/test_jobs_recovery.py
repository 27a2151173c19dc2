"""Recovery follows jobs: lease lapse (fake clock), dead pid on this host (a real kill -9)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from knowbase.catalog.db import Catalog
from knowbase.clock import ManualClock as FakeClock
from knowbase.jobs import Job, JobKind, JobManager
from knowbase.jobs.liveness import make_worker_id, parse_worker_id, worker_is_dead_here
from knowbase.processes import pid_alive

pytestmark = pytest.mark.timeout(60)

ABANDON = JobKind("t.abandon", 3, 1, 30, 600, "abandon")
RETRY = JobKind("t.retry", 3, 1, 30, 600, "retry")


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/catalog.sqlite"


@pytest.fixture
def catalog(url: str) -> Catalog:
    cat = Catalog(url)
    cat.create_schema()
    yield cat
    cat.dispose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def manager(catalog: Catalog, clock: FakeClock) -> JobManager:
    m = JobManager(catalog, clock=clock)
    m.settled = []  # type: ignore[attr-defined]

    def on_settled(job: Job, status: str, exc: BaseException | None) -> None:
        m.settled.append((job.id, status))  # type: ignore[attr-defined]

    m.register(ABANDON, lambda ctx: None, on_settled=on_settled)
    m.register(RETRY, lambda ctx: None, on_settled=on_settled)
    return m


def test_lease_lapse_abandon_cancels_and_retry_requeues(manager, clock: FakeClock) -> None:
    ab = manager.enqueuer.enqueue_now(ABANDON.name, {}, queue="q", idempotency_key="a")
    re = manager.enqueuer.enqueue_now(RETRY.name, {}, queue="q", idempotency_key="r")
    untouched = manager.enqueuer.enqueue_now(RETRY.name, {}, queue="q")
    # A worker of a remote host: only its lease can tell that it is gone.
    remote = "elsewhere:4242:1"
    manager.claims.claim(remote, limit=2)
    clock.advance(29)
    assert manager.leases.recover().count == 0  # lease still valid
    clock.advance(2)
    report = manager.leases.recover()
    assert (report.cancelled, report.requeued) == ((ab.id,), (re.id,))
    a, r, p = (
        manager.queries.get(ab.id),
        manager.queries.get(re.id),
        manager.queries.get(untouched.id),
    )
    assert (a.status, a.error_code, a.finished_at is not None) == (
        "cancelled",
        "job_interrupted",
        True,
    )
    assert (r.status, r.attempts, r.locked_by, r.lease_until) == ("pending", 1, None, None)
    assert r.run_at == int(clock() * 1000)
    assert (p.status, p.attempts, p.updated_at) == ("pending", 0, untouched.updated_at)
    assert manager.settled == [(ab.id, "cancelled")]  # type: ignore[attr-defined]
    # The abandoned job released its key; the requeued one still holds it.
    assert (
        manager.enqueuer.enqueue_now(ABANDON.name, {}, queue="q", idempotency_key="a").id != ab.id
    )
    assert manager.enqueuer.enqueue_now(RETRY.name, {}, queue="q", idempotency_key="r").id == re.id
    assert manager.leases.recover().count == 0  # idempotent


def test_pending_jobs_are_never_recovered(manager: JobManager, clock: FakeClock) -> None:
    jobs = [manager.enqueuer.enqueue_now(ABANDON.name, {}, queue="q") for _ in range(3)]
    clock.advance(10_000)
    assert manager.leases.recover().count == 0
    assert [manager.queries.get(j.id) for j in jobs] == jobs


def test_retry_policy_with_no_attempts_left_fails(manager: JobManager, clock) -> None:
    job = manager.enqueuer.enqueue_now(RETRY.name, {}, queue="q")
    for _ in range(3):
        manager.claims.claim("elsewhere:1:1")
        clock.advance(31)
        manager.leases.recover()
    j = manager.queries.get(job.id)
    assert (j.status, j.attempts, j.error_code) == ("failed", 3, "job_interrupted")
    assert manager.settled == [(job.id, "failed")]  # type: ignore[attr-defined]


def test_a_cancel_requested_job_is_cancelled_even_with_retry_policy(manager, clock) -> None:
    job = manager.enqueuer.enqueue_now(RETRY.name, {}, queue="q")
    manager.claims.claim("elsewhere:1:1")
    manager.cancels.request_cancel([job.id])
    clock.advance(31)
    assert manager.leases.recover().cancelled == (job.id,)
    assert manager.queries.get(job.id).error_code == "cancelled"


def test_unknown_kinds_are_left_for_a_process_that_knows_them(catalog, clock) -> None:
    full = JobManager(catalog, clock=clock)
    full.register(ABANDON, lambda ctx: None)
    job = full.enqueuer.enqueue_now(ABANDON.name, {}, queue="q")
    full.claims.claim("elsewhere:1:1")
    clock.advance(60)
    partial = JobManager(catalog, clock=clock)
    assert partial.leases.recover().skipped_unknown_kind == (job.id,)
    assert partial.queries.get(job.id).status == "running"


def test_liveness_helpers() -> None:
    me = parse_worker_id(make_worker_id())
    assert me is not None and me.pid == os.getpid()
    assert pid_alive(os.getpid(), me.started_ms)
    assert not worker_is_dead_here(str(me))
    # A pid that now belongs to a process younger than the worker is a reused pid.
    assert not pid_alive(os.getpid(), 0)
    assert parse_worker_id("garbage") is None
    assert len({make_worker_id() for _ in range(50)}) == 50
    assert not worker_is_dead_here("otherhost:1:1")  # not ours to judge
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not pid_alive(child.pid)


CHILD = textwrap.dedent(
    """
    import sys, time
    from knowbase.catalog.db import Catalog
    from knowbase.jobs import JobKind, JobManager, Worker

    url, name, policy = sys.argv[1:4]
    manager = JobManager(Catalog(url), lease_s=300, heartbeat_s=0.2)

    def forever(ctx):
        ctx.progress("working", 10)
        time.sleep(600)

    manager.register(JobKind(name, 3, 1, 30, 600, policy), forever)
    Worker(manager, threads=1, poll_s=0.05).start()
    time.sleep(600)
    """
)


@pytest.mark.parametrize("kind", [ABANDON, RETRY], ids=lambda k: k.recovery)
def test_dead_pid_on_this_host_is_recovered_at_once(url: str, catalog, kind: JobKind) -> None:
    manager = JobManager(catalog)  # real clock: the child's lease (300 s) stays valid
    settled: list[tuple[str, str]] = []
    manager.register(kind, lambda ctx: None, on_settled=lambda j, s, e: settled.append((j.id, s)))
    job = manager.enqueuer.enqueue_now(kind.name, {}, queue="q")
    waiting = manager.enqueuer.enqueue_now(kind.name, {}, queue="q")  # the child runs one at a time
    child = subprocess.Popen([sys.executable, "-c", CHILD, url, kind.name, kind.recovery])
    try:
        deadline = time.monotonic() + 30
        while (j := manager.queries.get(job.id)).progress_stage != "working":
            assert child.poll() is None, "child died early"
            assert time.monotonic() < deadline, "child never claimed the job"
            time.sleep(0.05)
        assert parse_worker_id(j.locked_by).pid == child.pid
        assert manager.leases.recover().count == 0  # alive: nothing to do
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    report = manager.leases.recover()
    after, still = manager.queries.get(job.id), manager.queries.get(waiting.id)
    if kind.recovery == "abandon":
        assert report.cancelled == (job.id,)
        assert after.status == "cancelled" and settled == [(job.id, "cancelled")]
    else:
        assert report.requeued == (job.id,)
        assert (after.status, after.attempts, after.locked_by) == ("pending", 1, None)
        assert settled == []
    assert report.workers_removed == 1
    assert (still.status, still.attempts) == ("pending", 0)


def test_the_sweep_reads_only_orphaned_jobs(
    manager, catalog: Catalog, clock: FakeClock, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Many healthy running jobs and one lapsed: the sweep loads the lapsed one, not all."""
    import sqlalchemy as sa

    from knowbase.catalog.schema import job as job_t
    from knowbase.jobs import recovery as recovery_mod

    with catalog.write_tx() as conn:
        for i in range(300):
            manager.enqueuer.enqueue(conn, RETRY.name, {}, queue=f"q{i % 10}")
    healthy = manager.claims.claim("w-live", limit=300)
    assert len(healthy) == 50  # 5 per queue; the rest stay pending
    lapsed = healthy[0]
    with catalog.write_tx() as conn:  # this one's worker stalled: its lease is long gone
        conn.execute(sa.update(job_t).where(job_t.c.id == lapsed.id).values(lease_until=0))
    loaded: list[str] = []
    real = recovery_mod.Job.from_row

    def counting(row):  # type: ignore[no-untyped-def]
        job = real(row)
        loaded.append(job.id)
        return job

    monkeypatch.setattr(recovery_mod.Job, "from_row", staticmethod(counting))
    report = manager.leases.recover()
    assert report.requeued == (lapsed.id,)
    assert set(loaded) == {lapsed.id}  # the orphan (and its release's RETURNING row) only
