"""The local model's gate: one forward pass at a time, and a waiting query goes first."""

from __future__ import annotations

import threading
import time

from knowbase.providers.local import _Gate


def test_a_waiting_query_goes_before_a_waiting_batch_pass() -> None:
    gate = _Gate()
    order: list[str] = []
    holding, release = threading.Event(), threading.Event()

    def hold_first() -> None:
        with gate.hold():
            holding.set()
            assert release.wait(5)

    def pass_of(name: str, urgent: bool) -> threading.Thread:
        def run() -> None:
            with gate.hold(urgent=urgent):
                order.append(name)

        return threading.Thread(target=run)

    first = threading.Thread(target=hold_first)
    first.start()
    assert holding.wait(5)
    batch = pass_of("batch pass", urgent=False)
    batch.start()
    time.sleep(0.05)  # the batch pass waits first ...
    query = pass_of("query", urgent=True)
    query.start()
    deadline = time.monotonic() + 5
    while gate._urgent == 0:  # the query is at the gate
        assert time.monotonic() < deadline
        time.sleep(0.001)
    release.set()
    for t in (first, batch, query):
        t.join(5)
    assert order == ["query", "batch pass"]  # ... and the query still goes before it


def test_holders_never_overlap() -> None:
    gate = _Gate()
    inside = 0
    peak = 0
    lock = threading.Lock()

    def run(urgent: bool) -> None:
        nonlocal inside, peak
        for _ in range(50):
            with gate.hold(urgent=urgent):
                with lock:
                    inside += 1
                    peak = max(peak, inside)
                time.sleep(0.0005)
                with lock:
                    inside -= 1

    threads = [threading.Thread(target=run, args=(i % 2 == 0,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert peak == 1
