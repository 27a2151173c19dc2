"""One ranked list from the search results of several bases (HTTP ``POST /search``, ``kb_search``).

The rule. Hybrid, keyword and vector scores are on one absolute scale on every base
(:mod:`knowbase.search.fusion`: the cosine and BM25 over the query's own bound, fused convexly),
so:

- when every result is an absolute score (``hybrid``, ``keyword``, ``vector``), merge by score:
  a base whose best hit is weak gets no top place;
- when every result is a ``relevance`` score and every base has the same rerank model (one
  model, one scale; providers do not all answer in [0, 1]), merge by score too;
- otherwise (a base fusing by ``rrf``, whose scores are ranks, or relevance beside absolute
  scores, or several rerank models) merge by rank, with reciprocal rank fusion over the per-base
  lists with equal weight (``1 / (K + rank)``, the same K as the lanes' fusion): each base's
  rank 1 first, then each base's rank 2, and so on. Ranks are the only scale all bases share.

Either way the lists are merged head by head, so each base's own order is kept; ties go to the
base listed first, then the better rank. Results keep their base's score and ``score_kind``;
``rank`` is the merged position. ``dedupe_text`` drops a passage whose exact text already
appeared (agents gain nothing from the same passage twice); a result is never listed twice.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from knowbase.catalog.models import Base
from knowbase.errors import KnowbaseError
from knowbase.search.rrf import K as RRF_K
from knowbase.search.search import ABSOLUTE, Mode, SearchResponse, SearchResult

MAX_PARALLEL = 8  # bases searched at once (a remote embedder's round trip overlaps)


@dataclass(frozen=True)
class MergedResult:
    """One result of the merged list: its base, its merged rank (from 1) and the base's hit."""

    base_id: str
    rank: int
    result: SearchResult


@dataclass(frozen=True)
class MultiSearch:
    """The merged results, each searched base's mode, the bases whose search failed, and
    each base's threshold cut (its explain's ``threshold``: value, source, hits cut)."""

    results: list[MergedResult]
    modes: dict[str, Mode]
    errors: dict[str, KnowbaseError]
    thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)


def search_bases(
    search: Callable[[Base], SearchResponse],
    bases: Sequence[Base],
    *,
    limit: int | None,
    dedupe_text: bool = False,
) -> MultiSearch:
    """Run ``search`` on each base (a base listed twice once), in parallel, and merge.

    A base whose search raises a ``KnowbaseError`` is reported in ``errors`` (in base order)
    and the others still merge; any other exception propagates.
    """
    unique = list({b.id: b for b in bases}.values())

    def one(b: Base) -> SearchResponse | KnowbaseError:
        try:
            return search(b)
        except KnowbaseError as exc:
            return exc

    if len(unique) <= 1:
        outcomes = [one(b) for b in unique]
    else:
        with ThreadPoolExecutor(max_workers=min(len(unique), MAX_PARALLEL)) as pool:
            outcomes = list(pool.map(one, unique))
    pairs = list(zip(unique, outcomes, strict=True))
    errors = {b.id: o for b, o in pairs if isinstance(o, KnowbaseError)}
    done = [(b, o) for b, o in pairs if isinstance(o, SearchResponse)]
    merged = merge_results(
        [(b.id, response.results) for b, response in done],
        top_k=limit,
        dedupe_text=dedupe_text,
        same_scale=len({b.rerank_model_id for b, _ in done}) <= 1,
    )
    cuts = {b.id: r.explain["threshold"] for b, r in done if "threshold" in (r.explain or {})}
    return MultiSearch(merged, {b.id: r.mode for b, r in done}, errors, cuts)


def merge_rule(
    per_base: Sequence[tuple[str, Sequence[SearchResult]]], *, same_scale: bool = True
) -> str:
    """``"score"`` when every result is an absolute score, or a relevance score and
    ``same_scale`` (the bases share a rerank model), else ``"rank"`` (see the module)."""
    kinds = {r.score_kind for _, results in per_base for r in results}
    if kinds and kinds <= ABSOLUTE:
        return "score"
    return "score" if same_scale and kinds == {"relevance"} else "rank"


def merge_results(
    per_base: Sequence[tuple[str, Sequence[SearchResult]]],
    *,
    top_k: int | None,
    dedupe_text: bool = False,
    same_scale: bool = True,
) -> list[MergedResult]:
    """Merge ``[(base_id, results best first), ...]`` into at most ``top_k`` results.

    ``top_k=None`` keeps them all. The order of ``per_base`` breaks ties. ``same_scale=False``
    (the bases rerank with different models) always merges by rank.

    >>> merge_results([("a", []), ("b", [])], top_k=10)
    []
    """
    by_score = merge_rule(per_base, same_scale=same_scale) == "score"

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
