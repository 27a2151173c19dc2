"""Identifiers: uuid4 for bases, time-ordered uuid7 for items and jobs.

Time ids are monotonic within a process (RFC 9562 §6.2, method 2 "monotonic random"): the 74
bits after the millisecond timestamp (``rand_a`` and ``rand_b``) are seeded at random on each
new millisecond and grow by a random increment for each further id in the same millisecond. So
ids made by one process sort in creation order, and everything ordered by ``(created_at, id)``
(claims, children, listings) is FIFO even within a millisecond. A clock that steps back does not
break the order: the generator keeps its last timestamp and counts on until the clock passes it.
Across processes ids sort by millisecond only.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable

_TAIL_BITS = 74  # 12 bits rand_a + 62 bits rand_b
# Seeds use one bit less than the tail, leaving at least 2**73 of room for increments.
_SEED_BITS = _TAIL_BITS - 1
_INCREMENT_BITS = 32


def new_base_id() -> str:
    return str(uuid.uuid4())


def _random_bits(bits: int) -> int:
    return int.from_bytes(os.urandom((bits + 7) // 8), "big") >> (-bits % 8)


class TimeIds:
    """A monotonic uuid7 generator; thread-safe. ``clock_ns`` defaults to :func:`time.time_ns`.

    The process shares one (:func:`new_time_id`); tests make their own with a stepped clock.
    """

    def __init__(self, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self._clock_ns = clock_ns
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_tail = 0

    def _next(self, ms: int) -> tuple[int, int]:
        with self._lock:
            if ms > self._last_ms:
                self._last_ms, self._last_tail = ms, _random_bits(_SEED_BITS)
            else:
                # Same millisecond, or the clock went back: keep the last timestamp, count up.
                tail = self._last_tail + 1 + _random_bits(_INCREMENT_BITS)
                if tail >= 1 << _TAIL_BITS:  # ~2**41 ids in one millisecond: borrow the next
                    self._last_ms, tail = self._last_ms + 1, _random_bits(_SEED_BITS)
                self._last_tail = tail
            return self._last_ms, self._last_tail

    def new(self) -> str:
        """A uuid7 (RFC 9562): 48-bit ms timestamp, version 7, then the monotonic tail."""
        ms, tail = self._next(self._clock_ns() // 1_000_000)
        value = (ms & ((1 << 48) - 1)) << 80
        value |= 0x7 << 76
        value |= (tail >> 62) << 64  # rand_a: the tail's top 12 bits
        value |= 0b10 << 62  # variant
        value |= tail & ((1 << 62) - 1)  # rand_b
        return str(uuid.UUID(int=value))


_PROCESS = TimeIds()


def new_time_id() -> str:
    """A uuid7 that sorts after every time id this process made before it (string or UUID)."""
    return _PROCESS.new()
