"""Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009), as in §7 "Hybrid"."""

from __future__ import annotations

from knowbase.errors import InvalidInput

K = 60  # the paper's constant; lancedb and the origin use the same


def rrf_fuse(lanes: list[tuple[list[str], float]], k: int = K) -> list[tuple[str, float]]:
    """Fuse ranked id lists: ``score(id) = Σ weight / (k + rank)`` with 1-based ranks.

    Each lane is ``(ids best first, weight)``; an id repeated inside a lane counts at its first
    rank only. Ties break by the best rank the id reached in any lane, then by the id, so the
    output is deterministic.

    >>> rrf_fuse([(["a", "b"], 0.5), (["b"], 0.5)])[0][0]
    'b'
    """
    if k <= 0:
        raise InvalidInput("RRF constant k must be positive", k=k)
    scores: dict[str, float] = {}
    best: dict[str, int] = {}
    for ids, weight in lanes:
        seen: set[str] = set()
        rank = 0
        for item in ids:
            if item in seen:
                continue
            seen.add(item)
            rank += 1
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
            best[item] = min(best.get(item, rank), rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))
