"""The deterministic ``hash:`` test provider and reranker."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowbase.errors import InvalidInput
from knowbase.providers.base import RerankResult
from knowbase.providers.hashing_provider import HashEmbeddings, HashReranker


@given(st.lists(st.text(max_size=60), max_size=25), st.integers(min_value=1, max_value=96))
@settings(max_examples=60, deadline=None)
def test_rows_are_unit_vectors_and_repeatable(texts: list[str], dims: int) -> None:
    provider = HashEmbeddings(f"d{dims}")
    vectors = provider.embed(texts)
    assert vectors.shape == (len(texts), dims) and vectors.dtype == np.float32
    if texts:
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(vectors, provider.embed(texts))
    # A row does not depend on its batch neighbours.
    for text, row in zip(texts, vectors, strict=True):
        np.testing.assert_array_equal(provider.embed([text])[0], row)


def test_same_vector_in_another_process() -> None:
    code = (
        "from knowbase.providers.hashing_provider import HashEmbeddings;"
        "print(HashEmbeddings('d16').embed(['Crash tests need the same vectors'])[0].tolist())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    here = HashEmbeddings("d16").embed(["Crash tests need the same vectors"])[0]
    assert np.array_equal(np.array(eval(out.stdout), dtype=np.float32), here)


def test_shared_words_are_closer() -> None:
    provider = HashEmbeddings("d256")
    query, near, far = provider.embed(
        ["reset my password", "how to reset a forgotten password", "two cups of flour"]
    )
    assert float(query @ near) > float(query @ far)
    assert float(query @ provider.embed(["RESET my Password"])[0]) == pytest.approx(1.0)


@pytest.mark.parametrize(("model", "dims"), [("default", 64), ("d8", 8), ("d1536?delay=0", 1536)])
def test_dims_from_the_model_name(model: str, dims: int) -> None:
    provider = HashEmbeddings(model)
    assert provider.dims == dims and provider.embed(["x"]).shape == (1, dims)
    assert provider.model_id == f"hash:{model}"
    assert provider.window is None and provider.scripts is None
    assert provider.count_tokens("some text") is None


def test_window_and_scripts_options() -> None:
    provider = HashEmbeddings("d8?window=128&scripts=Latin,Greek")
    assert provider.window == 128
    assert provider.scripts == frozenset({"Latin", "Greek"})


@pytest.mark.parametrize(
    "model",
    [
        "d0",
        "dx",
        "big",
        "",
        "d8?delay=-1",
        "d8?delay=soon",
        "d8?colour=red",
        "d8?window=1",
        "d65537",  # wider than a base may be (MAX_DIMENSIONS)
        "d99999999",
        "d\u00b2",  # a digit str.isdigit() knows and int() does not
        "d8?delay=1.5",  # past MAX_DELAY_S: a job worker would be parked
        "d8?delay=inf",
        "d8?delay=nan",
    ],
)
def test_bad_specs_are_invalid_input(model: str) -> None:
    with pytest.raises(InvalidInput):
        HashEmbeddings(model)


def test_delay_sleeps_once_per_batch() -> None:
    provider = HashEmbeddings("d8?delay=0.05")
    assert provider.delay == 0.05 and provider.batch_size == 10
    start = time.monotonic()
    provider.embed([f"text {i}" for i in range(25)])  # 3 batches of 10
    elapsed = time.monotonic() - start
    assert 0.15 <= elapsed < 1.0
    start = time.monotonic()
    provider.embed([])
    assert time.monotonic() - start < 0.05  # nothing to embed, nothing to wait for


def test_reranker_scores_by_shared_query_words() -> None:
    reranker = HashReranker()
    docs = ["two cups of flour", "reset your password here", "password policy", "Reset PASSWORD"]
    assert reranker.rerank("reset password", docs, top_n=3) == [
        RerankResult(1, 1.0),
        RerankResult(3, 1.0),
        RerankResult(2, 0.5),
    ]
    assert reranker.rerank("", docs, top_n=1) == [RerankResult(0, 0.0)]
    assert reranker.rerank("x", docs, top_n=0) == []
