"""The shared fetch limiter (§4.1 "URL": concurrency 3, at most 10 requests per 60 s).

A fetch takes a slot — a free concurrency seat *and* a free place in the sliding 60-second
window — before it touches the network; the caller starts its timeout only once the slot is
granted, so time spent queueing never counts against a request.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

WINDOW_S = 60.0


class FetchLimiter:
    """Concurrency cap plus a sliding-window rate cap, safe to share between threads.

    ``clock`` and ``sleep`` are injectable so tests can drive the window without waiting.

    >>> limiter = FetchLimiter(concurrency=3, per_minute=10)
    >>> with limiter.slot():
    ...     pass  # fetch here
    """

    def __init__(
        self,
        concurrency: int = 3,
        per_minute: int = 10,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if concurrency < 1 or per_minute < 1:
            raise ValueError("concurrency and per_minute must be at least 1")
        self.concurrency = concurrency
        self.per_minute = per_minute
        self._clock = clock
        self._sleep = sleep
        self._seats = threading.BoundedSemaphore(concurrency)
        self._lock = threading.Lock()
        self._starts: deque[float] = deque()

    def _wait_for_rate(self) -> None:
        while True:
            with self._lock:
                now = self._clock()
                while self._starts and self._starts[0] <= now - WINDOW_S:
                    self._starts.popleft()
                if len(self._starts) < self.per_minute:
                    self._starts.append(now)
                    return
                wait = self._starts[0] + WINDOW_S - now
            # Sleep outside the lock so other threads can check (and a real clock can advance);
            # loop because another thread may take the freed place first.
            self._sleep(max(wait, 0.0))

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Block until a concurrency seat and a rate place are free; hold the seat inside."""
        self._seats.acquire()
        try:
            self._wait_for_rate()
            yield
        finally:
            self._seats.release()


_default: FetchLimiter | None = None
_default_lock = threading.Lock()


def default_limiter() -> FetchLimiter:
    """The process-wide limiter every URL and sitemap fetch shares unless given another."""
    global _default
    with _default_lock:
        if _default is None:
            _default = FetchLimiter()
        return _default
