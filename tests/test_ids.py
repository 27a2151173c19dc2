"""Time ids sort in creation order within a process (RFC 9562 §6.2 monotonic uuid7)."""

from __future__ import annotations

import threading
import uuid

from hypothesis import given
from hypothesis import strategies as st

from knowbase import ids


def test_ids_made_in_a_tight_loop_sort_in_creation_order() -> None:
    made = [ids.new_time_id() for _ in range(20_000)]  # many per millisecond
    assert sorted(made) == made
    assert len(set(made)) == len(made)
    assert sorted(made, key=uuid.UUID) == made


def test_ids_are_valid_uuid7() -> None:
    u = uuid.UUID(ids.new_time_id())
    assert u.version == 7
    assert u.variant == uuid.RFC_4122


def test_ids_from_several_threads_sort_in_creation_order() -> None:
    """Each id is appended under the same lock that orders its making: the list is the
    global creation order, and it must already be sorted."""
    made: list[str] = []
    order = threading.Lock()
    start = threading.Barrier(8)

    def make() -> None:
        start.wait()
        for _ in range(2_000):
            with order:
                made.append(ids.new_time_id())

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 16_000
    assert sorted(made) == made
    assert len(set(made)) == len(made)


def test_unlocked_threads_still_get_unique_ids_sorted_per_thread() -> None:
    per_thread: list[list[str]] = [[] for _ in range(8)]

    def make(out: list[str]) -> None:
        for _ in range(2_000):
            out.append(ids.new_time_id())

    threads = [threading.Thread(target=make, args=(out,)) for out in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out in per_thread:
        assert sorted(out) == out
    assert len({i for out in per_thread for i in out}) == 16_000


@given(st.lists(st.integers(min_value=-5_000, max_value=5_000), min_size=1, max_size=60))
def test_a_clock_that_steps_back_never_breaks_the_order(steps: list[int]) -> None:
    """Whatever the clock does (same ms, forward, back), each id sorts after the last one."""
    now = [1_800_000_000_000 * 1_000_000]
    gen = ids.TimeIds(clock_ns=lambda: now[0])
    last = gen.new()
    for step_ms in steps:
        now[0] += step_ms * 1_000_000
        made = gen.new()
        assert made > last
        last = made


def test_the_timestamp_is_the_clock_when_it_moves_forward() -> None:
    now = [2_000_000_000_000 * 1_000_000]
    gen = ids.TimeIds(clock_ns=lambda: now[0])
    first = uuid.UUID(gen.new())
    now[0] += 5 * 1_000_000
    later = uuid.UUID(gen.new())
    assert (first.int >> 80, later.int >> 80) == (2_000_000_000_000, 2_000_000_000_005)


def test_a_full_millisecond_borrows_the_next_one() -> None:
    gen = ids.TimeIds(clock_ns=lambda: 7 * 1_000_000)
    first = gen.new()
    gen._last_tail = (1 << ids._TAIL_BITS) - 1  # the counter is exhausted
    second = uuid.UUID(gen.new())
    assert str(second) > first
    assert second.int >> 80 == 8
