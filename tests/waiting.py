"""Poll, don't sleep: the one helper a test waits with (issue 38 item 7).

A test that sleeps a fixed time and then asserts passes or fails with the machine's load; one
that polls waits exactly as long as the condition takes, up to a deadline that only a real
failure reaches.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float = 10.0,
    what: str = "condition",
    *,
    interval_s: float = 0.02,
) -> T:
    """Call ``predicate`` until it returns something truthy and return that; AssertionError
    naming ``what`` once ``timeout_s`` passed without it.

    >>> wait_until(lambda: 42)
    42
    """
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout_s:g} s")
        time.sleep(interval_s)
    return value
