"""Provider protocols: embeddings and rerank, chosen by id ``profile:model``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

# The widest vector a base may hold, whoever sets it (the ``dimensions`` field, a ``hash:d<N>``
# id, a provider's probe): 65,536 float32 is 256 KiB per chunk.
MAX_DIMENSIONS = 65_536


class EmbeddingProvider(Protocol):
    """Turns texts into vectors. Capabilities are attributes; ``embed`` is the only call."""

    model_id: str  # e.g. "local:all-minilm-l6-v2"
    dims: int | None  # known width, or None until probed
    window: int | None  # max input tokens of the model, if known
    scripts: frozenset[str] | None  # scripts the model reads ("Latin", "Han"…); None = all
    batch_size: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 array (len(texts), dims); raises EmbeddingMismatch / ProviderUnavailable."""

    def count_tokens(self, text: str) -> int | None:
        """Tokens the model's own tokenizer counts (incl. special tokens), or None if unknown."""


@dataclass(frozen=True)
class RerankResult:
    index: int
    score: float


class RerankProvider(Protocol):
    model_id: str

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> list[RerankResult]:
        """Return the chosen documents by index with relevance scores, best first."""
