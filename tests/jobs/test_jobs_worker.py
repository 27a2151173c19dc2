"""The worker end to end on every catalog backend (``backend_catalog``: a SQLite file, the
embedded PostgreSQL): outcomes, backoff, timeout, cancel, stop."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import sqlalchemy as sa

from knowbase.catalog.db import Catalog
from knowbase.clock import ManualClock as FakeClock
from knowbase.errors import NoTextExtracted, ProviderUnavailable
from knowbase.jobs import Cancelled, Job, JobContext, JobKind, JobManager, Worker, live_workers
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def catalog(backend_catalog: Catalog) -> Catalog:
    return backend_catalog


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def manager(catalog: Catalog, clock: FakeClock) -> JobManager:
    return JobManager(catalog, clock=clock, heartbeat_s=0.05, cancel_grace_s=1)


class Settled:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, BaseException | None]] = []

    def __call__(self, job: Job, status: str, exc: BaseException | None) -> None:
        self.calls.append((job.id, status, exc))


def worker(manager: JobManager, **kw) -> Worker:
    return Worker(manager, poll_s=0.02, **kw)


def test_completed_job_and_live_worker(manager: JobManager, catalog: Catalog) -> None:
    seen: list[dict] = []
    manager.register(JobKind("t.ok", 3, 1, 30, 60, "abandon"), lambda ctx: seen.append(ctx.payload))
    job = manager.enqueuer.enqueue_now("t.ok", {"x": 1}, queue="q", idempotency_key="k")
    w = worker(manager)
    with w:
        assert w.worker_id in live_workers(catalog, now=int(manager.clock() * 1000))
        w.run_until_idle(timeout_s=10)
        got = manager.queries.get(job.id)
    assert seen == [{"x": 1}]
    assert (got.status, got.attempts, got.error_code) == ("completed", 1, None)
    assert live_workers(catalog, now=int(manager.clock() * 1000)) == []
    # Terminal: the key is free again.
    assert manager.enqueuer.enqueue_now("t.ok", {}, queue="q", idempotency_key="k").id != job.id


def test_backoff_series_then_failed(manager: JobManager, clock: FakeClock) -> None:
    settled = Settled()
    calls: list[float] = []

    def flaky(ctx: JobContext) -> None:
        calls.append(clock())
        raise ProviderUnavailable("endpoint down")

    manager.register(JobKind("t.flaky", 3, 2, 60, 60, "abandon"), flaky, on_settled=settled)
    job = manager.enqueuer.enqueue_now("t.flaky", {}, queue="q")
    t0 = clock()
    w = worker(manager)
    w.run_until_idle(timeout_s=10)
    j = manager.queries.get(job.id)
    assert (j.status, j.attempts, j.error_code) == ("pending", 1, "provider_unavailable")
    assert j.run_at == int((t0 + 2) * 1000)
    clock.advance(1.9)
    w.run_until_idle(timeout_s=10)
    assert manager.queries.get(job.id).attempts == 1  # not due yet
    clock.advance(0.1)
    w.run_until_idle(timeout_s=10)
    j = manager.queries.get(job.id)
    assert (j.status, j.attempts, j.run_at) == ("pending", 2, int((t0 + 2 + 4) * 1000))
    clock.advance(4)
    w.run_until_idle(timeout_s=10)
    j = manager.queries.get(job.id)
    assert (j.status, j.attempts, j.error_code) == ("failed", 3, "provider_unavailable")
    assert [c - t0 for c in calls] == [0, 2, 6]
    assert [(s, type(e)) for _, s, e in settled.calls] == [("failed", ProviderUnavailable)]


def test_item_failed_is_not_retried(manager: JobManager) -> None:
    settled = Settled()

    def scanned(ctx: JobContext) -> None:
        raise NoTextExtracted("no text layer", path="a.pdf")

    manager.register(JobKind("t.item", 3, 1, 30, 60, "abandon"), scanned, on_settled=settled)
    job = manager.enqueuer.enqueue_now("t.item", {}, queue="q")
    worker(manager).run_until_idle(timeout_s=10)
    j = manager.queries.get(job.id)
    assert (j.status, j.attempts, j.error_code, j.error_message) == (
        "failed",
        1,
        "no_text_extracted",
        "no text layer",
    )
    assert len(settled.calls) == 1 and isinstance(settled.calls[0][2], NoTextExtracted)


def test_a_bug_in_a_handler_is_not_retried(
    manager: JobManager, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    settled = Settled()
    attempts: list[int] = []

    def buggy(ctx: JobContext) -> None:
        attempts.append(ctx.job.attempts)
        raise KeyError("missing_field")

    manager.register(JobKind("t.bug", 3, 1, 30, 60, "abandon"), buggy, on_settled=settled)
    job = manager.enqueuer.enqueue_now("t.bug", {}, queue="q")
    w = worker(manager)
    with caplog.at_level(logging.WARNING, logger="knowbase.jobs"):
        w.run_until_idle(timeout_s=10)
    clock.advance(60)  # a retry would be due by now
    w.run_until_idle(timeout_s=10)
    j = manager.queries.get(job.id)
    assert (j.status, j.attempts, j.error_code) == ("failed", 1, "internal_error")
    assert "KeyError" in (j.error_message or "") and attempts == [1]
    assert [(s, type(e)) for _, s, e in settled.calls] == [("failed", KeyError)]
    logged = [r for r in caplog.records if r.exc_info and r.exc_info[0] is KeyError]
    assert logged and "in buggy" in caplog.text  # the traceback names the handler


def test_an_io_error_retries_then_succeeds(manager: JobManager, clock: FakeClock) -> None:
    attempts: list[int] = []

    def flaky_disk(ctx: JobContext) -> None:
        attempts.append(ctx.job.attempts)
        if ctx.job.attempts == 1:
            raise OSError(5, "Input/output error")

    manager.register(JobKind("t.once", 3, 1, 30, 60, "abandon"), flaky_disk)
    job = manager.enqueuer.enqueue_now("t.once", {}, queue="q")
    w = worker(manager)
    w.run_until_idle(timeout_s=10)
    j = manager.queries.get(job.id)
    assert (j.status, j.error_code) == ("pending", "transient_error")
    clock.advance(1)
    w.run_until_idle(timeout_s=10)
    j = manager.queries.get(job.id)
    assert (j.status, j.error_code, j.attempts, attempts) == ("completed", None, 2, [1, 2])


def test_timeout_ends_the_attempt_and_fences_the_late_handler(
    manager: JobManager, clock: FakeClock
) -> None:
    settled = Settled()
    started = threading.Event()
    late: list[bool] = []

    def stuck(ctx: JobContext) -> None:
        started.set()
        ctx.cancel_event.wait(20)  # ignores time; wakes only when the worker gives up
        late.append(ctx.is_current_attempt())
        ctx.progress("late write", 100)

    manager.register(JobKind("t.stuck", 1, 1, 30, 5, "abandon"), stuck, on_settled=settled)
    job = manager.enqueuer.enqueue_now("t.stuck", {}, queue="q")
    with worker(manager):
        assert started.wait(10)
        clock.advance(4.9)
        time.sleep(0.1)
        assert manager.queries.get(job.id).status == "running"
        clock.advance(0.2)
        wait_until(lambda: manager.queries.get(job.id).is_terminal)
        wait_until(lambda: late)
    j = manager.queries.get(job.id)
    assert (j.status, j.error_code) == ("failed", "job_timeout")
    assert late == [False] and j.progress_stage is None
    assert [(s, type(e).__name__) for _, s, e in settled.calls] == [("failed", "JobTimeout")]


def test_timeout_with_attempts_left_goes_back_to_pending(manager, clock: FakeClock) -> None:
    started = threading.Event()

    def stuck(ctx: JobContext) -> None:
        started.set()
        ctx.cancel_event.wait(20)

    manager.register(JobKind("t.stuck2", 2, 3, 30, 5, "abandon"), stuck)
    job = manager.enqueuer.enqueue_now("t.stuck2", {}, queue="q")
    with worker(manager):
        assert started.wait(10)
        clock.advance(6)
        wait_until(lambda: manager.queries.get(job.id).status == "pending")
    j = manager.queries.get(job.id)
    assert (j.attempts, j.error_code, j.run_at) == (1, "job_timeout", int(clock() * 1000) + 3000)


def test_cooperative_cancel_of_a_running_job_from_another_process(
    manager: JobManager, catalog: Catalog, clock: FakeClock
) -> None:
    settled = Settled()
    started = threading.Event()

    def loop(ctx: JobContext) -> None:
        started.set()
        while True:
            ctx.check_cancelled()
            time.sleep(0.005)

    manager.register(JobKind("t.loop", 3, 1, 30, 600, "abandon"), loop, on_settled=settled)
    job = manager.enqueuer.enqueue_now("t.loop", {}, queue="q")
    # Another manager instance stands for another process: no in-memory shortcut, so the
    # cancel must travel through cancel_requested and the heartbeat.
    other = JobManager(catalog, clock=clock)
    other.register(JobKind("t.loop", 3, 1, 30, 600, "abandon"), loop)
    with worker(manager):
        assert started.wait(10)
        other.cancels.cancel_and_wait([job.id], timeout_s=10)
    j = manager.queries.get(job.id)
    assert (j.status, j.error_code, j.attempts) == ("cancelled", "cancelled", 1)
    assert [(s, type(e)) for _, s, e in settled.calls] == [("cancelled", Cancelled)]


def test_uncooperative_handler_is_cancelled_after_the_grace(manager, clock: FakeClock) -> None:
    started = threading.Event()
    manager.register(
        JobKind("t.deaf", 3, 1, 30, 600, "abandon"),
        lambda ctx: (started.set(), time.sleep(3)),
    )
    job = manager.enqueuer.enqueue_now("t.deaf", {}, queue="q")
    with worker(manager) as w:
        assert started.wait(10)
        manager.cancels.request_cancel([job.id])
        time.sleep(0.1)
        assert manager.queries.get(job.id).status == "running"  # still in its grace
        clock.advance(1.5)
        wait_until(lambda: manager.queries.get(job.id).status == "cancelled")
        wait_until(lambda: not w.active_job_ids())


def test_cancel_of_pending_job_never_runs_it(manager: JobManager) -> None:
    ran: list[str] = []
    manager.register(JobKind("t.p", 3, 1, 30, 60, "abandon"), lambda ctx: ran.append("x"))
    job = manager.enqueuer.enqueue_now("t.p", {}, queue="q")
    manager.cancels.cancel_and_wait([job.id], timeout_s=5)
    worker(manager).run_until_idle(timeout_s=10)
    assert ran == [] and manager.queries.get(job.id).status == "cancelled"


def test_progress_flushes_last_value_and_is_readable_while_running(manager, clock) -> None:
    go = threading.Event()
    midway = threading.Event()

    def work(ctx: JobContext) -> None:
        ctx.progress("reading", 40)
        midway.set()
        go.wait(10)
        for i in range(100):
            ctx.progress("embedding", 40 + i * 0.4, done=i)

    manager.register(JobKind("t.prog", 3, 1, 30, 60, "abandon"), work)
    job = manager.enqueuer.enqueue_now("t.prog", {}, queue="q")
    with worker(manager):
        assert midway.wait(10)
        j = manager.queries.get(job.id)
        assert (j.progress_stage, j.progress_percent) == ("reading", 40)
        go.set()
        wait_until(lambda: manager.queries.get(job.id).is_terminal)
    j = manager.queries.get(job.id)
    assert (j.status, j.progress_stage, j.progress_details) == (
        "completed",
        "embedding",
        {"done": 99},
    )
    assert j.progress_percent == pytest.approx(79.6)


def test_handler_enqueues_children(manager: JobManager) -> None:
    def parent(ctx: JobContext) -> None:
        for i in range(3):
            ctx.manager.enqueuer.enqueue_now(
                "t.child", {"i": i}, queue=ctx.job.queue, parent_id=ctx.job_id
            )

    manager.register(JobKind("t.parent", 3, 1, 30, 60, "abandon"), parent)
    manager.register(JobKind("t.child", 3, 1, 30, 60, "abandon"), lambda ctx: None)
    job = manager.enqueuer.enqueue_now("t.parent", {}, queue="base.b")
    worker(manager).run_until_idle(timeout_s=10)
    kids = manager.queries.children(job.id)
    assert [k.payload["i"] for k in kids] == [0, 1, 2]
    assert {k.status for k in kids} == {"completed"}


def test_worker_respects_its_thread_count_and_queue_cap(manager: JobManager) -> None:
    running: set[str] = set()
    peak = [0]
    lock = threading.Lock()
    gate = threading.Event()  # held shut until the test has seen one claim's jobs all running

    def work(ctx: JobContext) -> None:
        with lock:
            running.add(ctx.job_id)
            peak[0] = max(peak[0], len(running))
        gate.wait(10)
        with lock:
            running.discard(ctx.job_id)

    manager.register(JobKind("t.n", 3, 1, 30, 60, "abandon"), work)
    for _ in range(12):
        manager.enqueuer.enqueue_now("t.n", {}, queue="base.one")
    with worker(manager, threads=8) as w:
        try:
            wait_until(lambda: len(running) == 5, what="five jobs of the queue running at once")
            assert len(w.active_job_ids()) == 5  # 8 threads, yet the claim took no more
        finally:
            gate.set()
        wait_until(
            lambda: {j.status for j in manager.queries.list_jobs()} == {"completed"},
            20,
            "every job done",
        )
    assert peak[0] == 5  # the per-queue cap, below the thread count
    assert {j.status for j in manager.queries.list_jobs()} == {"completed"}


def test_stop_releases_running_jobs_by_policy(manager: JobManager) -> None:
    settled = Settled()
    started = threading.Barrier(3, timeout=10)

    def deaf(ctx: JobContext) -> None:
        started.wait()
        time.sleep(2)

    manager.register(JobKind("t.ab", 3, 1, 30, 600, "abandon"), deaf, on_settled=settled)
    manager.register(JobKind("t.re", 3, 1, 30, 600, "retry"), deaf, on_settled=settled)
    ab = manager.enqueuer.enqueue_now("t.ab", {}, queue="q")
    re = manager.enqueuer.enqueue_now("t.re", {}, queue="q")
    w = worker(manager)
    w.start()
    started.wait()
    w.stop(grace_s=0.1)
    a, r = manager.queries.get(ab.id), manager.queries.get(re.id)
    assert (a.status, a.error_code) == ("cancelled", "job_interrupted")
    assert (r.status, r.attempts, r.locked_by) == ("pending", 1, None)
    assert [(i, s) for i, s, _ in settled.calls] == [(ab.id, "cancelled")]


def test_an_attempt_that_lost_its_lease_stops_and_writes_nothing(
    catalog: Catalog, clock: FakeClock
) -> None:
    # A long heartbeat: the worker stalls, so its lease lapses before it renews.
    manager = JobManager(catalog, clock=clock, heartbeat_s=30)
    started = threading.Event()
    woke: list[bool] = []

    def work(ctx: JobContext) -> None:
        started.set()
        woke.append(ctx.cancel_event.wait(20))

    kind = JobKind("t.lost", 3, 1, 30, 600, "retry")
    manager.register(kind, work)
    job = manager.enqueuer.enqueue_now("t.lost", {}, queue="q")
    w = worker(manager)
    w.start()
    try:
        assert started.wait(10)
        w._stop_claiming.set()  # keep the requeued job pending while we look at it
        clock.advance(31)
        sweeper = JobManager(catalog, clock=clock)  # another process's periodic sweep
        sweeper.register(kind, work)
        assert sweeper.leases.recover().requeued == (job.id,)
        w._beat()  # the stalled worker's next heartbeat finds the job gone
        wait_until(lambda: woke == [True])
        wait_until(lambda: not w.active_job_ids())
        j = manager.queries.get(job.id)
        assert (j.status, j.attempts, j.error_code) == ("pending", 1, "job_interrupted")
    finally:
        w.stop(grace_s=0)


def test_a_job_completed_in_the_handlers_transaction_is_not_written_again(
    manager: JobManager, catalog: Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    # JobContext.complete_in: the handler's own final transaction completes the job.
    beats: list[int] = []
    done = threading.Event()

    def work(ctx: JobContext) -> None:
        with catalog.write_tx() as conn:
            assert ctx.complete_in(conn, "saved", rows=3)
        beats.append(len(manager.leases.heartbeat(ctx.worker_id, [ctx.job_id])[0]))
        done.wait(0.3)  # heartbeats meanwhile must not take the completed job for lost

    manager.register(JobKind("t.own", 3, 1, 30, 60, "retry"), work)
    job = manager.enqueuer.enqueue_now("t.own", {}, queue="q")
    writes: list[str] = []
    real = manager.attempts.finish
    manager.attempts.finish = lambda *a, **k: writes.append("finish") or real(*a, **k)  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="knowbase.jobs"):
        worker(manager).run_until_idle(timeout_s=10)
    got = manager.queries.get(job.id)
    assert (got.status, got.attempts, got.error_code) == ("completed", 1, None)
    assert (got.progress_stage, got.progress_percent) == ("saved", 100.0)
    assert beats == [0]  # no longer running: nothing to renew
    assert writes == []  # the worker wrote nothing more
    assert not [r for r in caplog.records if "superseded" in r.getMessage()]


def test_a_completion_rolled_back_with_its_transaction_settles_from_the_error(
    manager: JobManager, catalog: Catalog
) -> None:
    def work(ctx: JobContext) -> None:
        with catalog.write_tx() as conn:
            assert ctx.complete_in(conn)
            raise NoTextExtracted("the write after the completion failed")

    manager.register(JobKind("t.undo", 3, 1, 30, 60, "retry"), work)
    job = manager.enqueuer.enqueue_now("t.undo", {}, queue="q")
    worker(manager).run_until_idle(timeout_s=10)
    got = manager.queries.get(job.id)
    assert (got.status, got.error_code) == ("failed", "no_text_extracted")


def test_complete_in_is_the_attempt_fence(manager: JobManager, catalog: Catalog) -> None:
    ran: list[bool] = []

    def work(ctx: JobContext) -> None:
        with catalog.write_tx() as conn:  # a newer attempt took the job meanwhile
            conn.execute(
                sa.text("UPDATE job SET attempts = attempts + 1 WHERE id = :id"), {"id": ctx.job_id}
            )
            ran.append(ctx.complete_in(conn))

    manager.register(JobKind("t.fence", 3, 1, 30, 60, "retry"), work)
    job = manager.enqueuer.enqueue_now("t.fence", {}, queue="q")
    w = worker(manager)
    w.start()
    try:
        wait_until(lambda: ran)
        wait_until(lambda: not w.active_job_ids())
    finally:
        w.stop(grace_s=0)
    got = manager.queries.get(job.id)
    assert ran == [False]
    assert (got.status, got.attempts) == ("running", 2)  # untouched by the stale attempt


def test_a_batched_kind_needs_no_single_job_handler(manager: JobManager) -> None:
    """A kind with a batch handler runs every job through it, a lone one too (issue 38 item
    4: the index kind has one path); a kind with neither handler is refused."""
    batches: list[int] = []

    def batch(ctxs: list[JobContext]) -> dict[str, BaseException | None]:
        batches.append(len(ctxs))
        return {ctx.job_id: None for ctx in ctxs}

    kind = JobKind("t.batched_only", 3, 1, 30, 60, "abandon")
    manager.register(kind, None, batch_handler=batch, batch_max=4)
    job = manager.enqueuer.enqueue_now(kind.name, {}, queue="q")
    worker(manager).run_until_idle(timeout_s=10)
    assert batches == [1] and manager.queries.get(job.id).status == "completed"
    with pytest.raises(ValueError, match="a handler or a batch handler"):
        manager.register(JobKind("t.nothing", 3, 1, 30, 60, "abandon"), None)
