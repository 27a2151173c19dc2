"""What an eval lane needs of one base: its store, embedder, reranker and fusion settings.

Apart from :mod:`.judged` (which runs the lanes) so that :mod:`.shadow` can build the same
context with the shadow model's vector lane without importing the lanes back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowbase.search.fusion import FusionSettings


class QueryMemo:
    """The base's embedder with a memo of query vectors: a sweep embeds each query once."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._memo: dict[tuple[str, ...], np.ndarray] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def embed(self, texts: Any) -> np.ndarray:
        key = tuple(texts)
        if key not in self._memo:
            self._memo[key] = np.asarray(self._inner.embed(list(texts)), dtype=np.float32)
        return self._memo[key]


@dataclass
class EvalContext:
    """What a lane needs of one base (built from ``Knowledge`` by :func:`.judged.context_for`)."""

    store: Any
    dims: int | None
    embedder: Any
    reranker: Any
    fusion: FusionSettings
    visible: Callable[[set[str]], Mapping[str, Any]]
    judged: set[str] = field(default_factory=set)
    model: dict[str, Any] | None = None  # what the vector lane serves (``--model shadow``)
    missing: set[str] = field(default_factory=set)  # judged ids no document of the base has
    close: Callable[[], None] = lambda: None  # releases a store opened for the context


def serving_context(
    rt: Any,
    visible: Callable[[set[str]], Mapping[str, Any]],
    b: Any,
    qrels: Mapping[str, Mapping[str, int]],
) -> EvalContext:
    """The lanes' inputs for base ``b`` as it serves now (its own model's vectors)."""
    embedder = rt.embedder(b)
    return EvalContext(
        store=rt.store(b),
        dims=b.dimensions,
        embedder=QueryMemo(embedder) if embedder is not None else None,
        reranker=rt.reranker(b),
        fusion=FusionSettings.of_base(b),
        visible=visible,
        judged={d for judged in qrels.values() for d in judged},
    )
