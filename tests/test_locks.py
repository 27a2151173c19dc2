"""KeyedMutex: FIFO in a process, per-key independence, exclusion across processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock, Timeout

from knowbase.errors import InvalidInput
from knowbase.locks import KeyedMutex

pytestmark = pytest.mark.timeout(60)


def test_waiters_are_served_in_arrival_order() -> None:
    mutex = KeyedMutex()
    order: list[int] = []
    queued: list[threading.Thread] = []
    with mutex.hold("base"):
        for i in range(8):
            t = threading.Thread(target=lambda i=i: _hold_and_record(mutex, "base", order, i))
            t.start()
            queued.append(t)
            _wait_for_waiters(mutex, "base", i + 1)  # thread i is queued before i + 1 starts
    for t in queued:
        t.join(10)
    assert order == list(range(8))


def _hold_and_record(mutex: KeyedMutex, key: str, order: list[int], i: int) -> None:
    with mutex.hold(key):
        order.append(i)


def _wait_for_waiters(mutex: KeyedMutex, key: str, n: int) -> None:
    deadline = time.monotonic() + 10
    while len(mutex._slots[key].waiters) < n:
        assert time.monotonic() < deadline
        time.sleep(0.001)


def test_keys_are_independent() -> None:
    mutex = KeyedMutex()
    other_done = threading.Event()
    with mutex.hold("a"):
        t = threading.Thread(target=lambda: (mutex.hold("b").__enter__(), other_done.set()))
        t.start()
        assert other_done.wait(5)  # "b" is free while "a" is held
        t.join()
    assert mutex.held_by_current_thread("b") is False


def test_exclusive_under_contention() -> None:
    mutex = KeyedMutex()
    inside = [0]
    overlaps: list[int] = []
    counter = [0]

    def work() -> None:
        for _ in range(200):
            with mutex.hold("k"):
                inside[0] += 1
                if inside[0] != 1:
                    overlaps.append(inside[0])
                counter[0] += 1
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [] and counter[0] == 1200
    assert mutex._slots == {}  # nothing leaks once every holder left


def test_reentry_raises_instead_of_deadlocking() -> None:
    mutex = KeyedMutex()
    with mutex.hold("k"):
        assert mutex.held_by_current_thread("k")
        with pytest.raises(RuntimeError, match="not re-entrant"), mutex.hold("k"):
            pass
        assert mutex.held_by_current_thread("k")  # the failed re-entry left the hold intact
    assert not mutex.held_by_current_thread("k")


def test_release_on_exception_and_unsafe_keys(tmp_path: Path) -> None:
    mutex = KeyedMutex(tmp_path / "locks")
    with pytest.raises(ValueError), mutex.hold("k"):
        raise ValueError("x")
    with mutex.hold("k"):  # free again, file lock too
        pass
    for bad in ("", "../x", "a/b", ".hidden"):
        with pytest.raises(InvalidInput), mutex.hold(bad):
            pass


CONTENDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from knowbase.locks import KeyedMutex

    locks, log, tag = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    mutex = KeyedMutex(locks)
    with open(log, "a", buffering=1) as out:
        for _ in range(15):
            with mutex.hold("base1"):
                out.write(f"{tag} start {time.time_ns()}\\n")
                time.sleep(0.01)
                out.write(f"{tag} end {time.time_ns()}\\n")
    """
)


def test_processes_exclude_each_other(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    procs = [
        subprocess.Popen([sys.executable, "-c", CONTENDER, str(tmp_path / "locks"), str(log), t])
        for t in ("p1", "p2")
    ]
    for p in procs:
        assert p.wait(30) == 0
    events = [line.split() for line in log.read_text().splitlines()]
    assert len(events) == 60
    spans: dict[str, list[tuple[int, int]]] = {"p1": [], "p2": []}
    opened: dict[str, int] = {}
    for tag, what, ns in events:
        if what == "start":
            opened[tag] = int(ns)
        else:
            spans[tag].append((opened.pop(tag), int(ns)))
    intervals = sorted(spans["p1"] + spans["p2"])
    assert len(intervals) == 30
    for (_, end), (start, _) in zip(intervals, intervals[1:], strict=False):
        assert end <= start, "two critical sections overlapped"


HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from knowbase.locks import KeyedMutex

    mutex = KeyedMutex(Path(sys.argv[1]))
    with mutex.hold("base1"):
        print("held", flush=True)
        time.sleep(600)
    """
)


def test_lock_is_freed_when_the_holder_is_killed(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(locks)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Timeout):
            FileLock(locks / "base1.lock", timeout=0.2).acquire()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    mutex = KeyedMutex(locks)
    got = threading.Event()
    t = threading.Thread(target=lambda: (mutex.hold("base1").__enter__(), got.set()))
    t.start()
    assert got.wait(5), "the dead holder's lock was not freed"
