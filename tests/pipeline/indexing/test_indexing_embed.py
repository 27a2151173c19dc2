"""embed_missing / embed_query: dedupe, reuse, batching, progress, and every answer checked."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from knowbase.errors import EmbeddingMismatch, IndexingInterrupted, InvalidInput
from knowbase.pipeline.indexing.batcher import batcher_for, query_batcher_for
from knowbase.pipeline.indexing.embed import embed_missing, embed_query
from knowbase.units.hashing import text_hash

DIMS = 4


class LengthProvider:
    """Deterministic fake: vector = (len, words, vowels, 1); records every batch it gets."""

    model_id = "test:length"
    dims = DIMS
    window = None
    scripts = None

    def __init__(self, batch_size: int = 0, answer=None) -> None:
        self.batch_size = batch_size
        self.batches: list[list[str]] = []
        self._answer = answer

    def embed(self, texts: Sequence[str]):
        self.batches.append(list(texts))
        if self._answer is not None:
            return self._answer(texts)
        return np.array(
            [[len(t), len(t.split()), sum(ch in "aeiou" for ch in t), 1] for t in texts],
            dtype=np.float64,
        )

    def count_tokens(self, text: str) -> int | None:
        return None


class Store:
    """What ``existing`` asks: the hashes a store already holds; records each lookup."""

    def __init__(self, have: set[str] = frozenset()) -> None:
        self.have = set(have)
        self.lookups: list[list[str]] = []

    def existing(self, hashes: list[str]) -> set[str]:
        self.lookups.append(hashes)
        return self.have & set(hashes)


def test_dedupes_and_returns_float32_vectors_by_hash():
    provider, store = LengthProvider(), Store()
    out = embed_missing(
        ["alpha", "beta", "alpha"], existing=store.existing, provider=provider, dims=DIMS
    )
    assert provider.batches == [["alpha", "beta"]]
    assert set(out) == {text_hash("alpha"), text_hash("beta")}
    vector = out[text_hash("alpha")]
    assert vector.dtype == np.float32 and vector.shape == (DIMS,)
    assert vector.tolist() == [5, 1, 2, 1]


def test_reuses_what_the_store_has():
    provider, store = LengthProvider(), Store({text_hash("old")})
    out = embed_missing(["old", "new"], existing=store.existing, provider=provider, dims=DIMS)
    assert provider.batches == [["new"]]
    assert list(out) == [text_hash("new")]


def test_everything_known_means_no_provider_call():
    provider, store = LengthProvider(), Store({text_hash("a"), text_hash("b")})
    assert embed_missing(["a", "b"], existing=store.existing, provider=provider, dims=DIMS) == {}
    assert provider.batches == []


def test_empty_input_calls_nothing():
    def no_lookup(_hashes):
        raise AssertionError("existing() called for empty input")

    def no_progress(_done, _total):
        raise AssertionError("progress reported for empty input")

    provider = LengthProvider()
    out = embed_missing(
        [], existing=no_lookup, provider=provider, dims=DIMS, on_progress=no_progress
    )
    assert out == {} and provider.batches == []


def test_existing_is_asked_in_batches_of_500():
    bodies = [f"body {i}" for i in range(1203)]
    provider, store = LengthProvider(batch_size=1000), Store()
    embed_missing(bodies, existing=store.existing, provider=provider, dims=DIMS)
    assert [len(batch) for batch in store.lookups] == [500, 500, 203]


def test_batches_of_ten_by_default_with_progress_and_cancel_checks():
    bodies = [f"text {i}" for i in range(25)]
    provider, store = LengthProvider(), Store()
    progress, checks = [], []
    out = embed_missing(
        bodies,
        existing=store.existing,
        provider=provider,
        dims=DIMS,
        on_progress=lambda done, total: progress.append((done, total)),
        check_cancelled=lambda: checks.append(len(provider.batches)),
    )
    assert [len(b) for b in provider.batches] == [10, 10, 5]
    assert progress == [(10, 25), (20, 25), (25, 25)]
    assert checks == [0, 1, 2]
    assert len(out) == 25


def test_provider_batch_size_wins():
    provider = LengthProvider(batch_size=4)
    embed_missing(
        [str(i) for i in range(9)], existing=Store().existing, provider=provider, dims=DIMS
    )
    assert [len(b) for b in provider.batches] == [4, 4, 1]


def test_cancel_stops_before_the_next_batch():
    provider = LengthProvider(batch_size=2)

    def cancel_after_first():
        if provider.batches:
            raise IndexingInterrupted("cancelled")

    with pytest.raises(IndexingInterrupted):
        embed_missing(
            ["a", "b", "c", "d"],
            existing=Store().existing,
            provider=provider,
            dims=DIMS,
            check_cancelled=cancel_after_first,
        )
    assert provider.batches == [["a", "b"]]


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (lambda texts: np.ones((len(texts) - 1, DIMS)), "asked for 2 vectors, got 1"),
        (lambda texts: np.ones((len(texts), DIMS + 1)), "width 5, the base expects 4"),
        (lambda texts: [[1.0] * DIMS, []], "vector 1 of the batch is empty"),
        (lambda texts: [[1.0] * DIMS, [1.0] * 3], "vector 1 has width 3"),
        (lambda texts: np.full((len(texts), DIMS), np.nan), "NaN"),
        (lambda texts: np.ones(len(texts) * DIMS), "2-D"),
        (lambda texts: None, "list of vectors"),
        (lambda texts: [["x"] * DIMS, ["y"] * DIMS], "not a list of numbers"),
    ],
)
def test_bad_answers_raise_embedding_mismatch(answer, fragment):
    provider = LengthProvider(answer=answer)
    with pytest.raises(EmbeddingMismatch, match=fragment) as info:
        embed_missing(["a", "b"], existing=Store().existing, provider=provider, dims=DIMS)
    assert info.value.details["model_id"] == "test:length"


def test_width_error_names_expected_and_got():
    provider = LengthProvider(answer=lambda texts: np.ones((len(texts), 3)))
    with pytest.raises(EmbeddingMismatch) as info:
        embed_missing(["a"], existing=Store().existing, provider=provider, dims=DIMS)
    assert info.value.details["expected"] == DIMS and info.value.details["got"] == 3


def test_bad_dims_is_invalid_input():
    with pytest.raises(InvalidInput):
        embed_missing(["a"], existing=Store().existing, provider=LengthProvider(), dims=0)


def test_embed_query():
    vector = embed_query("hello there", LengthProvider(), DIMS)
    assert vector.dtype == np.float32 and vector.tolist() == [11, 2, 4, 1]
    wide = LengthProvider(answer=lambda texts: np.ones((1, DIMS * 2)))
    with pytest.raises(EmbeddingMismatch, match="width 8"):
        embed_query("q", wide, DIMS)
    none = LengthProvider(answer=lambda texts: np.ones((0, DIMS)))
    with pytest.raises(EmbeddingMismatch, match="asked for 1 vectors, got 0"):
        embed_query("q", none, DIMS)


def test_embed_query_keeps_an_lru_per_provider(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from knowbase.pipeline.indexing import embed as embed_module

    monkeypatch.setattr(embed_module, "QUERY_CACHE", embed_module._QueryCache(size=2))
    calls: list[str] = []

    class Counting(LengthProvider):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            calls.extend(texts)
            return super().embed(texts)

    provider = Counting()
    a = embed_query("alpha", provider, DIMS)
    assert embed_query("alpha", provider, DIMS) is a and calls == ["alpha"]
    assert not a.flags.writeable  # shared between callers: nobody may change it
    embed_query("beta", provider, DIMS)
    embed_query("gamma", provider, DIMS)  # evicts alpha, the least recently used
    embed_query("alpha", provider, DIMS)
    assert calls == ["alpha", "beta", "gamma", "alpha"]


class HeldQueries(LengthProvider):
    """``embed_queries`` whose first call blocks until released: searches pile up behind it."""

    def __init__(self) -> None:
        super().__init__()
        self.query_calls: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def embed_queries(self, texts: Sequence[str]):  # type: ignore[no-untyped-def]
        self.query_calls.append(list(texts))
        self.entered.set()
        assert self.release.wait(10), "the test never released the first call"
        return np.array(
            [[len(t), len(t.split()), sum(ch in "aeiou" for ch in t), 1] for t in texts]
        )


def test_concurrent_queries_share_one_model_call() -> None:
    provider = HeldQueries()
    first = threading.Thread(target=embed_query, args=("first query", provider, DIMS))
    first.start()
    assert provider.entered.wait(5)  # call 1 runs alone: a lone query was not held back
    assert provider.query_calls == [["first query"]]
    queries = [f"query number {i}" for i in range(15)]
    answers: dict[str, np.ndarray] = {}
    threads = [
        threading.Thread(target=lambda q=q: answers.__setitem__(q, embed_query(q, provider, DIMS)))
        for q in queries
    ]
    for t in threads:
        t.start()
    batcher = query_batcher_for(provider)
    deadline = time.monotonic() + 5
    while batcher._queued_texts < len(queries):  # every search waits behind call 1
        assert time.monotonic() < deadline, "the queries never reached the batcher"
        time.sleep(0.001)
    provider.release.set()
    for t in [first, *threads]:
        t.join(10)
    assert len(provider.query_calls) == 2  # 16 searches, 2 model calls
    assert sorted(provider.query_calls[1]) == sorted(queries)
    for q in queries:  # each search got its own row
        assert answers[q].tolist() == [len(q), len(q.split()), sum(c in "aeiou" for c in q), 1]
    assert provider.batches == []  # queries go to embed_queries, never to embed


def test_the_query_batcher_never_lingers_and_falls_back_to_embed() -> None:
    provider = LengthProvider()
    batcher = query_batcher_for(provider)
    assert batcher.linger_s == 0 and batcher is query_batcher_for(provider)
    assert batcher is not batcher_for(provider)  # imports never delay a search's query
    embed_query("plain model", provider, DIMS)
    assert provider.batches == [["plain model"]]  # no embed_queries: embed
