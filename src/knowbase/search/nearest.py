"""The sentence of a vector-only hit nearest the query, for its snippet (issue 42).

A hit the keyword lane did not find holds no query word, so :mod:`.snippet` has no line to
centre on. The dense lane found it by meaning; the sentence that carries that meaning is the
one whose own vector is nearest the query's. Embedding every sentence of every candidate would
cost a model call per sentence of the whole base's hits; only the hits *shown* and *without a
matching line* are split into sentences (lines, table rows), the first of them always, the
next in rank order while their text fits :data:`MAX_CHARS` (a model's cost grows with the
tokens it reads), and embedded in one batched call with the base's own provider. A hit past
the budget keeps its opening. The query vector is the one the search computed (the
provider's query cache).

Measured on ``local:all-minilm-l6-v2`` (CPU, 2 cores): see docs/search-snippets.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from knowbase.providers.base import EmbeddingProvider
from knowbase.search.snippet import sentence_spans

# A 256-token MiniLM chunk holds ~10-20 sentences; a 1,000-token chunk ~50.
MAX_UNITS_PER_HIT = 64
# ~600 tokens read per search: ~100-150 ms of MiniLM on two CPU cores, the first two
# vector-only hits of a 256-token base; the first hit is read whatever its size (a 1,024-token
# chunk: one hit, ~4,000 characters), the rest only within the budget (docs' figures).
MAX_CHARS = 2_500
# Shorter units ("Yes.", "| - |") say too little to be nearest anything.
MIN_UNIT_CHARS = 12


def units(text: str) -> list[tuple[int, int]]:
    """The sentences of ``text`` worth embedding: (start, end) offsets, in order, at most
    :data:`MAX_UNITS_PER_HIT`."""
    spans = [(s, e) for s, e in sentence_spans(text) if e - s >= MIN_UNIT_CHARS]
    return spans[:MAX_UNITS_PER_HIT]


def nearest_units(
    texts: Sequence[str], query_vector: np.ndarray, embedder: EmbeddingProvider
) -> list[tuple[int, int] | None]:
    """For each text, the (start, end) of its sentence nearest ``query_vector`` by cosine;
    None for a text with fewer than two sentences (its opening is that sentence) or past the
    :data:`MAX_CHARS` budget (``texts`` best first; the first is read whatever its size). One
    ``embed`` call for all texts."""
    per_text: list[list[tuple[int, int]]] = []
    budget = MAX_CHARS
    for text in texts:
        spans = units(text)
        size = sum(e - s for s, e in spans)
        if len(spans) < 2 or (size > budget and budget < MAX_CHARS):
            spans, size = [], 0
        budget = max(0, budget - size)
        per_text.append(spans)
    flat = [texts[i][s:e] for i, spans in enumerate(per_text) for s, e in spans]
    if not flat:
        return [None] * len(texts)
    vectors = np.asarray(embedder.embed(flat), dtype=np.float32)
    q = np.asarray(query_vector, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[1] != q.shape[0]:
        return [None] * len(texts)  # a provider answering another width: keep the openings
    norms = np.linalg.norm(vectors, axis=1) * (np.linalg.norm(q) or 1.0)
    cosines = vectors @ q / np.where(norms == 0, 1.0, norms)
    out: list[tuple[int, int] | None] = []
    at = 0
    for spans in per_text:
        if not spans:
            out.append(None)
            continue
        best = int(np.argmax(cosines[at : at + len(spans)]))
        out.append(spans[best])
        at += len(spans)
    return out
