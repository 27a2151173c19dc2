"""The worker: claim → run under heartbeat → decide → persist → one log line.

Each attempt runs in its own daemon thread. Threads cannot be killed, so on timeout, cancel or
shutdown the worker *ends the attempt* (a conditional UPDATE) and stops waiting; a handler that
returns later finds its attempt gone (``ctx.is_current_attempt()`` is False) and its own final
UPDATE matches no row. A slot is freed when its attempt ends, not when its thread does.

An idle worker sleeps until a wake-up (:mod:`knowbase.jobs.wakeups`: a job of its queues became
claimable or a slot freed, in this process or, on PostgreSQL, any) or its poll interval ends.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable

from knowbase.catalog.db import Catalog
from knowbase.errors import Unavailable
from knowbase.jobs.actor import Actor, acting
from knowbase.jobs.attempt_state import Attempt as _Attempt
from knowbase.jobs.context import JobContext
from knowbase.jobs.disk_full import DiskFullBackoff, is_disk_full
from knowbase.jobs.liveness import list_live_workers
from knowbase.jobs.manager import JobManager
from knowbase.jobs.model import Cancelled, Job
from knowbase.jobs.retry import JobTimeout, decide

log = logging.getLogger("knowbase.jobs")

#: Idle poll without cross-process wake-ups (SQLite: other processes' enqueues are found so).
POLL_S = 0.2
#: Idle poll while LISTEN is up: only a lost notification waits for it.
LISTEN_POLL_S = 1.0


class Worker:
    """Runs the jobs of ``manager``'s registered kinds on ``queues`` (None: every queue),
    at most ``threads`` attempts at a time.

    ``with Worker(manager) as w: ...`` starts and stops it. ``run_until_idle`` is for tests and
    the CLI.
    """

    def __init__(
        self,
        manager: JobManager,
        *,
        threads: int = 4,
        queues: Iterable[str] | None = None,
        poll_s: float | None = None,
        wakeups: bool = True,
    ) -> None:
        self.manager = manager
        self.worker_id = manager.worker_id
        self.threads = threads
        self.queues = None if queues is None else list(queues)
        self._poll_s = poll_s
        # False: poll only (the enqueue→claim latency benchmark's baseline).
        self.wakeups = wakeups
        self._unsubscribe: Callable[[], None] | None = None
        self._active: dict[str, _Attempt] = {}
        self._active_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop_claiming = threading.Event()
        self._claims_off = threading.Event()  # the loop saw _stop_claiming: no claim after it
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._idle_seq = 0
        self._threads: list[threading.Thread] = []
        self._run_queue: queue.SimpleQueue[list[_Attempt] | None] = queue.SimpleQueue()
        self._runner_lock = threading.Lock()
        self._runners: list[threading.Thread] = []
        self._idle_runners = 0
        self._started = False
        # A full disk pauses claiming (jobs/disk_full.py); waiters read ``disk.error``.
        self.disk = DiskFullBackoff()

    @property
    def poll_s(self) -> float:
        """How long an idle worker waits before it looks for due jobs again. Wake-ups end the
        wait early; while other processes' wake-ups are heard (PostgreSQL LISTEN up) the poll
        is only the fallback for a lost one, so it may be longer."""
        if self._poll_s is not None:
            return self._poll_s
        if self.wakeups and self.manager.wakeups.listening.is_set():
            return LISTEN_POLL_S
        return POLL_S

    def _on_wakeup(self, queue: str | None) -> None:
        if queue is None or self.queues is None or queue in self.queues:
            self._wake.set()

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Register in the ``worker`` table, run the recovery sweep, start claiming."""
        if self._started:
            return
        self._started = True
        self._stop.clear()
        self._stop_claiming.clear()
        self._claims_off.clear()
        self.manager.leases.register_worker(self.worker_id)
        if self.wakeups:
            self._unsubscribe = self.manager.wakeups.subscribe(self._on_wakeup)
        self.manager.leases.recover()
        for target, name in ((self._loop, "claim"), (self._heartbeat_loop, "heartbeat")):
            t = threading.Thread(target=target, name=f"kb-worker-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        log.info("worker %s started (%d threads)", self.worker_id, self.threads)

    def stop(self, grace_s: float = 10) -> None:
        """Stop claiming, give running handlers ``grace_s`` (real time), then release the
        jobs still running by their kind's recovery policy."""
        if not self._started:
            return
        self._stop_claiming.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._wake.set()
        # A claim in flight would start an attempt after our snapshot: let it land first.
        self._claims_off.wait(timeout=10)
        deadline = time.monotonic() + grace_s
        for att in self._snapshot():
            att.done.wait(max(0.0, deadline - time.monotonic()))
        for att in self._snapshot():
            if att.end():
                try:
                    self.manager.leases.release(att.job, self.worker_id, "worker stopped")
                except Exception as exc:  # a full disk: the next sweep releases it instead
                    self._log_error(exc, f"releasing {att.job.call_string}")
                finally:
                    self._finish_attempt(att)
                    att.ctx.cancel_event.set()
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=max(5.0, self.poll_s * 4))
        self._threads.clear()
        with self._runner_lock:
            for _ in self._runners:
                self._run_queue.put(None)  # idle runners exit; a stuck one exits when it returns
            self._runners.clear()
            self._run_queue = queue.SimpleQueue()  # a restart never meets those exit markers
            self._idle_runners = 0
        try:
            self.manager.leases.unregister_worker(self.worker_id)
        except Exception as exc:  # a dead worker's row is dropped by the next sweep
            self._log_error(exc, "unregistering")
        finally:
            self._started = False
        log.info("worker %s stopped", self.worker_id)

    def __enter__(self) -> Worker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run_until_idle(self, *, timeout_s: float = 60) -> None:
        """Process jobs until none is claimable (pending and due, of a registered kind) and
        none runs here. Starts the worker for the call when it is not running. Raises
        ``Unavailable`` when it is still busy after ``timeout_s``."""
        started_here = not self._started
        if started_here:
            self.start()
        try:
            with self._idle:
                # Two idle observations: the first may come from a claim that began before
                # this call (and missed a job enqueued just before it).
                target = self._idle_seq + 2
                self._wake.set()
                done = self._idle.wait_for(
                    lambda: self._idle_seq >= target or self.disk.error is not None, timeout_s
                )
                if self.disk.error is not None:
                    raise self.disk.error
                if not done:
                    raise Unavailable(
                        f"jobs still running after {timeout_s:g} s", worker_id=self.worker_id
                    )
        finally:
            if started_here:
                self.stop()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` for this worker's next idle observation (a claim found
        nothing and nothing runs here); True if one came. It comes at most once per poll."""
        with self._idle:
            seen = self._idle_seq
            return self._idle.wait_for(lambda: self._idle_seq > seen, timeout_s)

    def active_job_ids(self) -> list[str]:
        return [a.job.id for a in self._snapshot()]

    # --- the claim loop ------------------------------------------------------------------
    def _snapshot(self) -> list[_Attempt]:
        with self._active_lock:
            return list(self._active.values())

    def _loop(self) -> None:
        while not self._stop.is_set():
            # Cleared before the claim, not after the wait: a wake-up that lands while we
            # claim makes the next wait return at once instead of being lost.
            self._wake.clear()
            try:
                self._supervise()
                claimed: list[Job] = []
                if self._stop_claiming.is_set():
                    self._claims_off.set()
                elif self.disk.paused_s > 0:
                    with self._idle:  # a waiter gives up on a full disk (run_until_idle)
                        self._idle.notify_all()
                else:
                    # a batch of jobs runs on one thread: a thread is one attempt group
                    free, batch_room = self._room()
                    if free > 0:
                        claimed = self.manager.claims.claim_groups(
                            self.worker_id, queues=self.queues, limit=free, batch_room=batch_room
                        )
                        if claimed:
                            self.disk.clear()  # the claim's write went through
                        for group in claimed:
                            self._start_group(group)
                    if not claimed and not self._snapshot():
                        with self._idle:
                            self._idle_seq += 1
                            self._idle.notify_all()
            except Exception as exc:  # the loop must outlive a locked or flaky database
                self._log_error(exc, "claim")
                claimed = []
            if not claimed:
                self._wake.wait(max(self.poll_s, self.disk.paused_s))

    def _room(self) -> tuple[int, dict[str, int]]:
        """Free threads (one per attempt group), and the batches each batched kind may add."""
        groups = {id(a.group): a for a in self._snapshot()}.values()
        room = {
            reg.kind.name: reg.batch_concurrency
            for reg in map(self.manager.registry.get, self.manager.kinds())
            if reg is not None and reg.batch_handler is not None
        }
        for att in groups:
            if att.reg.kind.name in room:
                room[att.reg.kind.name] -= 1
        return self.threads - len(groups), room

    def _start_group(self, jobs: list[Job]) -> None:
        group: list[_Attempt] = []
        for job in jobs:
            reg = self.manager.registry.registration(job.kind)
            ctx = JobContext(job, self.manager, self.worker_id)
            att = _Attempt(job, ctx, reg, self.manager.clock())
            att.group = group
            group.append(att)
            with self._active_lock:
                self._active[job.id] = att
            self.manager.cancels.attach(ctx)
            if job.cancel_requested:
                ctx.cancel_event.set()
        self._dispatch(group)

    # Handlers run on reused runner threads: torch (and OpenMP) set up per-thread state, so a
    # fresh thread per attempt made embedding ~15 % slower. A runner stuck in a handler that
    # ignored its timeout keeps its thread; the next attempt then gets a new runner.
    def _dispatch(self, att: list[_Attempt]) -> None:
        with self._runner_lock:
            if self._idle_runners > 0:
                self._idle_runners -= 1
            else:
                t = threading.Thread(
                    target=self._runner, args=(self._run_queue,), name="kb-job-runner", daemon=True
                )
                self._runners.append(t)
                t.start()
        self._run_queue.put(att)

    def _runner(self, work: queue.SimpleQueue[list[_Attempt] | None]) -> None:
        while True:
            group = work.get()
            if group is None:
                return
            if group[0].reg.batch_handler is None:
                self._run(group[0])
            else:
                self._run_batch(group)
            with self._runner_lock:
                self._idle_runners += 1

    def _run(self, att: _Attempt) -> None:
        error: BaseException | None = None
        try:
            handler = att.reg.handler
            assert handler is not None  # a kind without one runs only in batches (_run_batch)
            # a job acts as whoever asked for it: the jobs it enqueues name the same key
            with acting(Actor(att.job.by_key, att.job.by_surface)):
                handler(att.ctx)
        except BaseException as exc:  # noqa: BLE001 - the one place every outcome is decided
            error = exc
        finally:
            if att.end():
                self._settle(att, error, cancel_requested=att.ctx.cancel_event.is_set())
            else:
                log.debug("%s returned after its attempt ended", att.job.call_string)

    def _run_batch(self, group: list[_Attempt]) -> None:
        """A batch handler's attempts: each settles on its own outcome (one job's failure is
        never its batch-mates'); one the worker already ended (timeout, cancel) is skipped."""
        handler = group[0].reg.batch_handler
        assert handler is not None
        first = group[0].job  # a batch is one base's index jobs; they act as the first did
        try:
            with acting(Actor(first.by_key, first.by_surface)):
                errors = handler([att.ctx for att in group])
        except BaseException as exc:  # noqa: BLE001 - the whole batch failed: every attempt's
            errors = {att.job.id: exc for att in group}
        for att in group:
            if att.end():
                cancelled = att.ctx.cancel_event.is_set()
                self._settle(att, errors.get(att.job.id), cancel_requested=cancelled)

    def _supervise(self) -> None:
        now = self.manager.clock()
        for att in self._snapshot():
            # completing: the handler's transaction carries the job's completion, so the row
            # decides (a timeout settled now found it completed: "superseded; dropped")
            if att.ending or att.ctx.completing:
                continue
            if now >= att.deadline:
                if att.end_from_worker():
                    timeout = JobTimeout(f"ran past its {att.reg.kind.timeout_s:g} s timeout")
                    self._settle(att, timeout, cancel_requested=False)
                    # Only now wake the handler: its attempt is already over in the catalog,
                    # so is_current_attempt() is False whatever it does next.
                    att.ctx.cancel_event.set()
            elif att.ctx.cancel_event.is_set():
                if att.cancel_seen_at is None:
                    att.cancel_seen_at = now
                elif now - att.cancel_seen_at >= self.manager.cancel_grace_s and (
                    att.end_from_worker()
                ):
                    self._settle(att, Cancelled("did not stop within the grace"), True)

    def _settle(self, att: _Attempt, error: BaseException | None, cancel_requested: bool) -> None:
        """Decide, persist, log once. Only the caller that won ``att.end()`` gets here."""
        job = att.job
        if error is not None and is_disk_full(error):
            self.disk.hit(error, job.call_string)
        try:
            if att.ctx.completing and error is None:
                # The handler's final transaction completed the job (JobContext.complete_in).
                took = self.manager.clock() - att.started
                log.info("%s completed in %.2f s", job.call_string, took)
                return
            decision = decide(att.reg.kind, job.attempts, error, cancel_requested=cancel_requested)
            progress = att.ctx.take_pending_progress()
            after = self.manager.attempts.finish(
                job, self.worker_id, decision, error=error, progress=progress
            )
            took = self.manager.clock() - att.started
            if after is None and att.ctx.completing:  # committed, then the handler raised
                log.warning(
                    "%s completed; the error after it is ignored: %s", job.call_string, error
                )
            elif after is None:
                log.warning("%s ended after its attempt was superseded; dropped", job.call_string)
            elif decision.status == "completed":
                log.info("%s completed in %.2f s", job.call_string, took)
            elif decision.status == "pending":
                log.warning(
                    "%s %s: %s; retry in %.1f s",
                    job.call_string,
                    decision.error_code,
                    decision.error_message,
                    decision.delay_s,
                )
            else:
                internal = decision.error_code == "internal_error"
                log.warning(
                    "%s %s: %s: %s",
                    job.call_string,
                    decision.status,
                    decision.error_code,
                    decision.error_message,
                    exc_info=error if internal else None,
                )
        except Exception as exc:
            self._log_error(exc, f"persisting the outcome of {job.call_string}")
        finally:
            self._finish_attempt(att)

    def _finish_attempt(self, att: _Attempt) -> None:
        self.manager.cancels.detach(att.ctx)
        with self._active_lock:
            if self._active.get(att.job.id) is att:
                del self._active[att.job.id]
        att.done.set()
        self._wake.set()

    def _log_error(self, exc: BaseException, where: str) -> None:
        """A full disk pauses claiming and is logged once per episode; anything else is
        logged with its traceback."""
        if is_disk_full(exc):
            self.disk.hit(exc, where)
        else:
            log.exception("worker %s %s error", self.worker_id, where)

    # --- heartbeat -----------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        next_sweep = time.monotonic() + max(self.manager.heartbeat_s * 2, 1.0)
        while not self._stop.wait(self.manager.heartbeat_s):
            try:
                self._beat()
                if time.monotonic() >= next_sweep:
                    self.manager.leases.recover()
                    next_sweep = time.monotonic() + max(self.manager.heartbeat_s * 2, 1.0)
            except Exception as exc:
                self._log_error(exc, "heartbeat")

    def _beat(self) -> None:
        # an attempt whose final transaction completes its job has no lease left to renew
        atts = [a for a in self._snapshot() if not a.ending and not a.ctx.completing]
        owned, cancel = self.manager.leases.heartbeat(self.worker_id, [a.job.id for a in atts])
        for att in atts:
            if att.job.id not in owned:
                # Recovered elsewhere (our lease lapsed while we stalled): stop the handler;
                # the finish UPDATE will match nothing.
                if att.end_from_worker():
                    att.ctx.cancel_event.set()
                    self._settle(att, Cancelled("attempt lost its lease"), True)
            elif att.job.id in cancel:
                att.ctx.cancel_event.set()
            else:
                att.ctx.flush_progress()


def live_workers(catalog: Catalog, *, now: int | None = None, lease_s: float = 30) -> list[str]:
    """Ids of workers with a heartbeat within the lease (``now`` in ms, default: wall clock);
    :func:`~knowbase.jobs.liveness.list_live_workers` has their host, pid and jobs."""
    return [w.id for w in list_live_workers(catalog, now=now, lease_s=lease_s)]


__all__ = ["Worker", "live_workers"]
