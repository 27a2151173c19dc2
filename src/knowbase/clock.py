"""Clocks. Everything time-based (leases, backoff, rate limits, polls) takes a clock callable;
production passes ``time.time``, tests and simulations a :class:`ManualClock`."""

from __future__ import annotations

import threading


class ManualClock:
    """A thread-safe clock that moves only when ``advance`` is called.

    >>> clock = ManualClock(100.0); clock.advance(5); clock()
    105.0
    """

    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.t

    def advance(self, s: float) -> None:
        with self._lock:
            self.t += s
