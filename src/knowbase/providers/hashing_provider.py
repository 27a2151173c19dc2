"""The test provider: deterministic embeddings (and a rerank) from hashed words, no model.

Model ids are ``hash:<spec>[?key=value&…]``:

- ``hash:default`` — 64 dims; ``hash:d128`` — 128 dims (at most ``MAX_DIMENSIONS``, like a
  base's ``dimensions`` field);
- ``delay=0.2`` — sleep 0.2 s per batch, so a test can kill a worker mid-indexing
  deterministically (``hash:d64?delay=0.2``); at most ``MAX_DELAY_S``, so a job worker is never
  parked for long;
- ``window=N`` and ``scripts=Latin,Greek`` — declare a window / covered scripts, to test the
  chunk cap and the dense lane's script vote without the real model.

The registry offers it only when ``Settings.test_providers`` is on.

A vector is a signed bag of hashed lower-cased words, normalised: texts that share words are
closer, like a keyword match, and the same text gives the same vector in every process
(blake2b, never Python's salted ``hash``). It is *not* a semantic model.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from urllib.parse import parse_qsl

import numpy as np
import regex

from knowbase.errors import InvalidInput
from knowbase.providers.base import MAX_DIMENSIONS, RerankResult

_WORD = regex.compile(r"\w+")
DEFAULT_DIMS = 64
MAX_DELAY_S = 1.0


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _bucket(word: str, dims: int) -> tuple[int, float]:
    digest = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "big")
    # The top bit picks a sign so collisions cancel out on average instead of piling up.
    return digest % dims, (1.0 if digest >> 63 else -1.0)


def hash_vector(text: str, dims: int) -> np.ndarray:
    """The normalised float32 vector of ``text``; never all zeros (a wordless text hashes whole)."""
    vector = np.zeros(dims, dtype=np.float32)
    for word in _words(text) or ["\x00" + text]:
        index, sign = _bucket(word, dims)
        vector[index] += sign
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:  # every word cancelled out: fall back to the whole text's bucket
        index, sign = _bucket("\x00" + text, dims)
        vector[index] = sign
        norm = 1.0
    return vector / norm


def _parse_spec(model: str) -> tuple[str, dict[str, str]]:
    name, _, query = model.partition("?")
    try:
        options = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
    except ValueError as exc:
        raise InvalidInput(f"hash:{model}: cannot read the options after '?'", model=model) from exc
    return name, options


class HashEmbeddings:
    """Deterministic test embeddings for ``hash:`` model ids (see the module docstring).

    >>> provider = HashEmbeddings("d8?delay=0")
    >>> provider.embed(["a b", "a b"]).shape
    (2, 8)
    """

    batch_size = 10

    def __init__(self, model: str = "default") -> None:
        name, options = _parse_spec(model)
        unknown = set(options) - {"delay", "window", "scripts"}
        if unknown:
            raise InvalidInput(
                f"hash:{model}: unknown option(s) {sorted(unknown)}; known: delay, window, scripts",
                model=model,
            )
        digits = name[1:]
        if name == "default":
            dims = DEFAULT_DIMS
        # isascii: str.isdigit() also accepts "²" and other digits int() refuses.
        elif name.startswith("d") and digits.isascii() and digits.isdigit():
            dims = int(digits)
        else:
            raise InvalidInput(
                f"hash:{model}: the model must be 'default' or 'd<dims>' (e.g. hash:d64)",
                model=model,
            )
        if not 1 <= dims <= MAX_DIMENSIONS:
            raise InvalidInput(
                f"hash:{model}: dims must lie in 1..{MAX_DIMENSIONS:,}", model=model, dims=dims
            )
        try:
            self.delay = float(options.get("delay", 0) or 0)
            self.window: int | None = int(options["window"]) if options.get("window") else None
        except ValueError as exc:
            raise InvalidInput(f"hash:{model}: delay/window must be numbers", model=model) from exc
        if not 0 <= self.delay <= MAX_DELAY_S or (self.window is not None and self.window < 3):
            raise InvalidInput(
                f"hash:{model}: delay must lie in 0..{MAX_DELAY_S} s and window be >= 3",
                model=model,
            )
        scripts = options.get("scripts")
        self.scripts: frozenset[str] | None = (
            frozenset(s.strip() for s in scripts.split(",") if s.strip()) if scripts else None
        )
        self.model_id = f"hash:{model}"
        self.dims: int | None = dims

    def count_tokens(self, text: str) -> int | None:
        """No tokenizer: callers use their estimate."""
        return None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One normalised row per text; sleeps ``delay`` seconds per batch of ``batch_size``."""
        dims = self.dims or DEFAULT_DIMS
        rows = np.zeros((len(texts), dims), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            if self.delay:
                time.sleep(self.delay)  # the point of ``delay``: a window for kill tests
            for i in range(start, min(start + self.batch_size, len(texts))):
                rows[i] = hash_vector(texts[i], dims)
        return rows


class HashReranker:
    """Deterministic test reranker for ``hash:`` ids: score = share of query words in the document.

    >>> HashReranker().rerank("reset password", ["flour", "reset my password"], 1)
    [RerankResult(index=1, score=1.0)]
    """

    def __init__(self, model: str = "default") -> None:
        self.model_id = f"hash:{model}"

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> list[RerankResult]:
        """Every document scored in [0, 1], best first (ties by index), at most ``top_n``."""
        query_words = set(_words(query))
        results = []
        for index, document in enumerate(documents):
            shared = query_words & set(_words(document))
            score = len(shared) / len(query_words) if query_words else 0.0
            results.append(RerankResult(index=index, score=score))
        results.sort(key=lambda r: (-r.score, r.index))
        return results[: max(top_n, 0)]
