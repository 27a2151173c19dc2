"""One ranked list from the search results of several bases (HTTP ``POST /search``, ``kb_search``).

The rule. A base's ``ranking`` scores are not comparable with another base's: a hybrid base
scores by RRF (≈ 0.016 at rank 1), a BM25-only base by −bm25 (unbounded, corpus-dependent) or,
on its LIKE fallback, by −length (negative). Sorting by raw score lets whichever kind is larger
take every top place. So:

- when every result is a ``relevance`` score (a reranker's, on the same scale for every base),
  merge by score — a base with nothing relevant gets no top place;
- otherwise merge by rank, with reciprocal rank fusion over the per-base lists with equal weight
  (``1 / (K + rank)``, the same K as the lanes' fusion): each base's rank 1 first, then each
  base's rank 2, and so on. Ranks are the only scale all bases share.

Either way the lists are merged head by head, so each base's own order is kept; ties go to the
base listed first, then the better rank. Results keep their base's score and ``score_kind``;
``rank`` is the merged position. ``dedupe_text`` drops a passage whose exact text already
appeared (agents gain nothing from the same passage twice); a result is never listed twice.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from knowbase.pipeline.store.rrf import K as RRF_K
from knowbase.query.search import SearchResult


@dataclass(frozen=True)
class MergedResult:
    """One result of the merged list: its base, its merged rank (from 1) and the base's hit."""

    base_id: str
    rank: int
    result: SearchResult


def merge_rule(per_base: Sequence[tuple[str, Sequence[SearchResult]]]) -> str:
    """``"score"`` when every result is a relevance score, else ``"rank"`` (see the module)."""
    kinds = {r.score_kind for _, results in per_base for r in results}
    return "score" if kinds == {"relevance"} else "rank"


def merge_results(
    per_base: Sequence[tuple[str, Sequence[SearchResult]]],
    *,
    top_k: int | None,
    dedupe_text: bool = False,
) -> list[MergedResult]:
    """Merge ``[(base_id, results best first), ...]`` into at most ``top_k`` results.

    ``top_k=None`` keeps them all. The order of ``per_base`` breaks ties.

    >>> merge_results([("a", []), ("b", [])], top_k=10)
    []
    """
    by_score = merge_rule(per_base) == "score"

    def key(results: Sequence[SearchResult], pos: int) -> float:
        return results[pos].score if by_score else 1.0 / (RRF_K + pos + 1)

    # heads: (−key, base order, position in that base); the smallest tuple is the next result
    heads = [(-key(results, 0), order, 0) for order, (_, results) in enumerate(per_base) if results]
    heapq.heapify(heads)
    seen: set[Hashable] = set()
    merged: list[MergedResult] = []
    while heads and (top_k is None or len(merged) < top_k):
        _, order, pos = heapq.heappop(heads)
        base_id, results = per_base[order]
        if pos + 1 < len(results):
            heapq.heappush(heads, (-key(results, pos + 1), order, pos + 1))
        hit = results[pos]
        ident: Hashable = ("text", hit.text) if dedupe_text else (base_id, hit.chunk_id)
        if ident in seen or (base_id, hit.chunk_id) in seen:
            continue
        seen.add(ident)
        seen.add((base_id, hit.chunk_id))
        merged.append(MergedResult(base_id, len(merged) + 1, hit))
    return merged
