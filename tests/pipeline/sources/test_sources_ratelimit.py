"""FetchLimiter: sliding 60 s window driven by a fake clock, concurrency cap with threads."""

from __future__ import annotations

import threading
import time

import pytest

from knowbase.pipeline.sources.ratelimit import FetchLimiter, default_limiter


class FakeClock:
    """A clock that only moves when the limiter sleeps (or the test advances it)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_eleventh_request_in_a_minute_waits_for_the_window() -> None:
    clock = FakeClock()
    limiter = FetchLimiter(concurrency=3, per_minute=10, clock=clock, sleep=clock.sleep)
    granted: list[float] = []
    for i in range(10):
        clock.now = 1000.0 + i  # one request per second
        with limiter.slot():
            granted.append(clock())
    assert clock.sleeps == []
    clock.now = 1030.0
    with limiter.slot():
        granted.append(clock())
    # The first start (t=1000) leaves the window at t=1060: the 11th waits exactly 30 s.
    assert clock.sleeps == [pytest.approx(30.0)]
    assert granted[-1] == pytest.approx(1060.0)
    # The 12th waits for the second start (t=1001) to age out.
    with limiter.slot():
        granted.append(clock())
    assert granted[-1] == pytest.approx(1061.0)


def test_window_frees_without_waiting_after_a_quiet_minute() -> None:
    clock = FakeClock()
    limiter = FetchLimiter(per_minute=2, clock=clock, sleep=clock.sleep)
    for _ in range(2):
        with limiter.slot():
            pass
    clock.now += 60.0
    with limiter.slot():
        pass
    assert clock.sleeps == []


def test_concurrency_is_capped_at_three() -> None:
    limiter = FetchLimiter(concurrency=3, per_minute=1000)
    lock = threading.Lock()
    release = threading.Event()
    active = 0
    peak = 0
    done = 0

    def worker() -> None:
        nonlocal active, peak, done
        with limiter.slot():
            with lock:
                active += 1
                peak = max(peak, active)
            release.wait(10)
            with lock:
                active -= 1
                done += 1

    threads = [threading.Thread(target=worker) for _ in range(7)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while active < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    # Negative check: give the four blocked threads a moment to (wrongly) get in.
    time.sleep(0.2)
    assert active == 3
    release.set()
    for t in threads:
        t.join(10)
    assert done == 7
    assert peak == 3


def test_rejects_nonsense_limits() -> None:
    with pytest.raises(ValueError):
        FetchLimiter(concurrency=0)
    with pytest.raises(ValueError):
        FetchLimiter(per_minute=0)


def test_default_limiter_is_shared_and_matches_spec() -> None:
    limiter = default_limiter()
    assert limiter is default_limiter()
    assert (limiter.concurrency, limiter.per_minute) == (3, 10)
