"""One intent, several phrasings: fuse the result lists of up to five queries into one (issue
44 item 2).

An agent that rephrases a question (`"vpn key rotation"`, `"when does the VPN key change"`)
runs each phrasing through both lanes as an ordinary search; the lists are then fused by
reciprocal rank: a passage's fused score is the sum over the lists that hold it of
``1 / (k + rank)``, so a passage found by several phrasings comes first, and within that the
better-ranked. Each list was already cut by its own threshold, so one threshold applies to
all; the score a result shows stays the absolute score of its best phrasing (what thresholds
and multi-base merges read). Ties break on the best absolute score, then on the chunk id:
the same call returns the same list.

    >>> fused_order([["a", "b"], ["b", "c"]])
    ['b', 'a', 'c']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from knowbase.errors import InvalidInput
from knowbase.search.search import SearchResponse, SearchResult

#: Phrasings one search takes: the query and up to four more.
MAX_PHRASINGS = 5
#: Reciprocal-rank constant (Cormack et al.'s 60: ranks far down still count a little).
RRF_K = 60


def check_phrasings(query: str, also: Sequence[str]) -> list[str]:
    """The phrasings to run, the query first, duplicates dropped; InvalidInput past five."""
    phrasings = list(dict.fromkeys([query, *(a for a in also if a and a.strip())]))
    if len(phrasings) > MAX_PHRASINGS:
        raise InvalidInput(
            f"at most {MAX_PHRASINGS} phrasings of one search (the query and "
            f"{MAX_PHRASINGS - 1} more); got {len(phrasings)}",
            phrasings=len(phrasings),
        )
    return phrasings


def fused_order(lists: Sequence[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Ids of ``lists`` (each best first) ordered by their summed reciprocal rank."""
    score: dict[str, float] = {}
    for ids in lists:
        for rank, key in enumerate(ids, start=1):
            score[key] = score.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(score, key=lambda key: (-score[key], key))


def fuse_phrasings(
    phrasings: Sequence[str], responses: Sequence[SearchResponse], top_k: int
) -> SearchResponse:
    """One response from the responses of each phrasing (same order), at most ``top_k``
    results; ``explain`` says how many phrasings found each result and each phrasing's mode."""
    rrf: dict[str, float] = {}
    found_by: dict[str, int] = {}
    best: dict[str, SearchResult] = {}
    for response in responses:
        for rank, hit in enumerate(response.results, start=1):
            # a document entry (group="document") is the same result whichever passage led it
            key = hit.item_id if hit.citations is not None else hit.chunk_id
            rrf[key] = rrf.get(key, 0.0) + 1.0 / (RRF_K + rank)
            found_by[key] = found_by.get(key, 0) + 1
            if key not in best or hit.score > best[key].score:
                best[key] = hit
    order = sorted(rrf, key=lambda key: (-rrf[key], -best[key].score, key))[:top_k]
    results = [replace(best[key], rank=n) for n, key in enumerate(order, start=1)]
    explain = {
        **responses[0].explain,
        "phrasings": [
            {"query": q, "mode": r.mode, "results": len(r.results)}
            for q, r in zip(phrasings, responses, strict=True)
        ],
        "phrasing_fusion": {"method": "rrf", "k": RRF_K},
        "found_by": {key: found_by[key] for key in order},
    }
    return SearchResponse(results, responses[0].mode, explain)


__all__ = ["MAX_PHRASINGS", "RRF_K", "check_phrasings", "fuse_phrasings", "fused_order"]
