"""The embedding batcher: many jobs' texts in few provider calls, each job its own rows.

The oracle is the ``hash:`` provider's :func:`hash_vector`: a row is right when it equals the
vector of the text it was asked for, so a row handed to the wrong job (or the wrong position)
shows at once.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowbase.errors import ProviderUnavailable
from knowbase.jobs.model import Cancelled
from knowbase.pipeline.indexing.batcher import EmbeddingBatcher, batcher_for
from knowbase.providers.hashing_provider import HashEmbeddings, hash_vector

DIMS = 16


class Gate:
    """A provider call that records its texts and blocks until released (one call at a time)."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.entered = threading.Semaphore(0)
        self.release = threading.Semaphore(0)
        self.fail_on = fail_on
        self.concurrent = 0
        self.peak = 0
        self._lock = threading.Lock()

    def __call__(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            self.calls.append(list(texts))
            self.concurrent += 1
            self.peak = max(self.peak, self.concurrent)
        self.entered.release()
        try:
            assert self.release.acquire(timeout=10), "the test never released the call"
            if self.fail_on is not None and any(self.fail_on in t for t in texts):
                raise ProviderUnavailable("model server answered 503", status=503)
            return np.stack([hash_vector(t, DIMS) for t in texts])
        finally:
            with self._lock:
                self.concurrent -= 1


def oracle(texts: list[str]) -> list[np.ndarray]:
    return [hash_vector(t, DIMS) for t in texts]


def in_thread(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    """Run ``fn`` in a thread; ``result()`` returns its value or raises its exception."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def result():  # type: ignore[no-untyped-def]
        t.join(10)
        assert not t.is_alive(), "the caller is still waiting"
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        return box["value"]

    return result


def wait_queued(batcher: EmbeddingBatcher, texts: int) -> None:
    deadline = time.monotonic() + 5
    while batcher._queued_texts < texts:
        assert time.monotonic() < deadline, "texts never reached the queue"
        time.sleep(0.001)


def same_rows(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    if len(got) != len(want):
        return False
    return all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_several_jobs_share_one_call_and_each_gets_its_own_rows() -> None:
    gate = Gate()
    b = EmbeddingBatcher(gate, batch_size=8, linger_s=0)
    first = in_thread(b.embed, ["warm up the model"])
    assert gate.entered.acquire(timeout=5)  # call 1 runs: the next jobs queue behind it
    jobs = {
        "a": ["alpha one", "alpha two"],
        "b": ["beta one"],
        "c": ["gamma one", "gamma two", "gamma three"],
    }
    results = {k: in_thread(b.embed, v) for k, v in jobs.items()}
    wait_queued(b, 6)
    gate.release.release(2)
    assert same_rows(first(), oracle(["warm up the model"]))
    for name, texts in jobs.items():
        assert same_rows(results[name](), oracle(texts)), name
    assert len(gate.calls) == 2
    assert sorted(gate.calls[1]) == sorted(t for v in jobs.values() for t in v)
    assert list(b.stats.tickets_per_call) == [1, 3]


def test_a_job_larger_than_a_batch_spans_calls_in_order() -> None:
    calls: list[int] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        return np.stack(oracle(texts))

    b = EmbeddingBatcher(embed, batch_size=4, linger_s=0)
    texts = [f"text number {i}" for i in range(10)]
    assert same_rows(b.embed(texts), oracle(texts))
    assert calls == [4, 4, 2]


def test_sort_by_length_still_returns_rows_by_position() -> None:
    seen: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        seen.append(texts)
        return np.stack(oracle(texts))

    b = EmbeddingBatcher(embed, batch_size=8, sort_by_length=True, linger_s=0)
    texts = ["a much longer text than the others", "short", "a medium text"]
    assert same_rows(b.embed(texts), oracle(texts))
    assert seen == [sorted(texts, key=len)]


def test_cancel_takes_queued_texts_out_and_drops_in_flight_rows() -> None:
    gate = Gate()
    b = EmbeddingBatcher(gate, batch_size=4, linger_s=0)
    stop_a, stop_b = threading.Event(), threading.Event()

    def checker(flag: threading.Event):  # type: ignore[no-untyped-def]
        def check() -> None:
            if flag.is_set():
                raise Cancelled("job cancelled")

        return check

    warm = in_thread(b.embed, ["warm"])
    assert gate.entered.acquire(timeout=5)  # call 1 runs; a (3 texts) and c (1) queue for call 2
    a = in_thread(b.embed, ["a1", "a2", "a3"], check_cancelled=checker(stop_a))
    wait_queued(b, 3)
    c = in_thread(b.embed, ["c1"])
    wait_queued(b, 4)
    gate.release.release()
    assert same_rows(warm(), oracle(["warm"]))
    assert gate.entered.acquire(timeout=5)
    assert gate.calls[1] == ["a1", "a2", "a3", "c1"]
    b_job = in_thread(b.embed, ["b1", "b2"], check_cancelled=checker(stop_b))
    wait_queued(b, 2)
    stop_b.set()  # cancelled while queued: its texts must never reach the provider
    with pytest.raises(Cancelled):
        b_job()
    assert b._queued_texts == 0
    stop_a.set()  # cancelled while its batch is in flight
    with pytest.raises(Cancelled):
        a()
    gate.release.release(5)
    assert same_rows(c(), oracle(["c1"]))  # its batch-mate's cancel costs c nothing
    assert not any(t.startswith("b") for call in gate.calls for t in call)
    # The batcher keeps serving after both cancels.
    assert same_rows(b.embed(["after"]), oracle(["after"]))


def test_a_failed_call_fails_only_the_jobs_in_that_batch() -> None:
    gate = Gate(fail_on="poison")
    b = EmbeddingBatcher(gate, batch_size=3, linger_s=0)
    first = in_thread(b.embed, ["warm"])
    assert gate.entered.acquire(timeout=5)
    # call 2 = [x1, poison, y1] (fails), call 3 = [y2, z1] (succeeds)
    x = in_thread(b.embed, ["x1", "poison"])
    wait_queued(b, 2)
    y = in_thread(b.embed, ["y1", "y2"])
    wait_queued(b, 4)
    z = in_thread(b.embed, ["z1"])
    wait_queued(b, 5)
    gate.release.release(3)
    assert same_rows(first(), oracle(["warm"]))
    with pytest.raises(ProviderUnavailable) as fx:
        x()
    with pytest.raises(ProviderUnavailable) as fy:
        y()
    assert fx.value is not fy.value  # each job raises its own copy (tracebacks stay apart)
    assert fx.value.code == "provider_unavailable" and fx.value.details["status"] == 503
    assert same_rows(z(), oracle(["z1"]))
    # y's second text was never sent: its job failed with the batch that held its first one.
    assert gate.calls == [["warm"], ["x1", "poison", "y1"], ["z1"]]


def test_remote_requests_in_flight_are_bounded() -> None:
    gate = Gate()
    b = EmbeddingBatcher(gate, batch_size=2, max_in_flight=3, linger_s=0)
    texts = [f"t{i}" for i in range(20)]
    result = in_thread(b.embed, texts)
    for _ in range(3):
        assert gate.entered.acquire(timeout=5)
    assert not gate.entered.acquire(timeout=0.2)  # a fourth request waits for a free slot
    assert gate.peak == 3
    gate.release.release(10)
    assert same_rows(result(), oracle(texts))
    assert gate.peak == 3 and len(gate.calls) == 10


@settings(max_examples=30, deadline=None)
@given(
    jobs=st.lists(
        st.lists(st.text(min_size=1, max_size=12), min_size=0, max_size=7), min_size=1, max_size=9
    ),
    batch_size=st.integers(1, 9),
    in_flight=st.integers(1, 3),
    sort=st.booleans(),
)
def test_every_job_gets_exactly_its_own_rows(
    jobs: list[list[str]], batch_size: int, in_flight: int, sort: bool
) -> None:
    provider = HashEmbeddings(f"d{DIMS}")
    b = EmbeddingBatcher(
        provider.embed, batch_size=batch_size, max_in_flight=in_flight, sort_by_length=sort
    )
    waiting = [in_thread(b.embed, texts) for texts in jobs]
    for texts, result in zip(jobs, waiting, strict=True):
        assert same_rows(result(), oracle(texts))
    assert b.stats.texts == sum(len(t) for t in jobs)
    assert b.stats.largest <= batch_size


def test_batcher_for_is_one_per_provider_and_reads_its_attributes() -> None:
    provider = HashEmbeddings("d8")
    b = batcher_for(provider)
    assert batcher_for(provider) is b
    assert batcher_for(HashEmbeddings("d8")) is not b
    assert (b.batch_size, b.max_in_flight, b.sort_by_length) == (10, 1, False)
    assert same_rows(b.embed(["hello there"]), [hash_vector("hello there", 8)])


def test_stats_keep_only_the_latest_calls() -> None:
    """A long-lived worker's batcher must not keep one entry per call forever."""
    b = EmbeddingBatcher(lambda t: np.ones((len(t), 2), np.float32), batch_size=1, linger_s=0)
    for i in range(1100):
        b.embed([f"text {i}"])
    assert b.stats.calls == 1100
    assert len(b.stats.tickets_per_call) == 1024
