""" "Nothing matched", decided once per query (issue 40 item 2).

A per-hit cut (drop every hit under a score) silences gibberish but also drops the paraphrase
that shares no word with its passage and sits under the cut. Instead the search first asks
whether the query matched the base at all, from two signals its lanes already computed:

- **keyword coverage**: the keyword lane's best score on its absolute scale
  (:mod:`knowbase.index.keyword_scale`): the idf-weighted share of the query's terms one unit
  holds — 0 when the base holds none of them;
- **dense margin**: how far the best cosine rises above the query's own band — the mean of the
  next :data:`BAND` cosines of its vector lane — as a share of the room above that band,
  ``(best − band) / (1 − band)``. A query about something the base holds has a passage well
  above the rest; gibberish lands on a flat band. Measured from the query's own band, so it
  reads alike for a model whose cosines crowd into a narrow band (e5: unrelated passages
  ≈ 0.75) and one whose cosines spread wide (MiniLM: ≈ 0.1).

A query matched when either signal passes its bar (:data:`KEYWORD_MATCH`, :data:`DENSE_MARGIN`);
then its ranked list is kept down to :data:`FLOOR` only (hits the keyword lane found are always
kept); otherwise the search returns nothing. The bars were chosen on the judged sets and the
unmatched queries of ``eval/unmatched`` (docs/eval.md, "Nothing matched").
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: A keyword hit at least this good means the base holds the query's words.
KEYWORD_MATCH = 0.2
#: The best cosine this far above the query's band (a share of the room above it) means a
#: passage stands out from the band.
DENSE_MARGIN = 0.2
#: Cosines the margin is measured against (the lane's best after the first).
BAND = 50
#: In a matched query, hybrid and vector hits the keyword lane did not find are kept down to
#: this score (at α 0.4: a calibrated cosine of 0.125; 0.1 cut 4 more relevant hits of 78 on en).
FLOOR = 0.05


@dataclass(frozen=True)
class Verdict:
    """Whether the query matched the base, and the signals that said so."""

    matched: bool
    keyword: float
    margin: float | None

    def explain(self) -> dict[str, Any]:
        out: dict[str, Any] = {"matched": self.matched, "keyword": round(self.keyword, 4)}
        if self.margin is not None:
            out["dense_margin"] = round(self.margin, 4)
        return out


def dense_margin(cosines: Sequence[float], band: int = BAND) -> float | None:
    """The best cosine's rise above the mean of the next ``band``, over the room above that
    mean (None with fewer than three cosines: no band to rise from).

    >>> round(dense_margin([0.9, 0.3, 0.2, 0.1]), 3)
    0.875
    >>> round(dense_margin([0.9, 0.8, 0.75, 0.7]), 3)  # e5's narrow band: the same rise
    0.6
    """
    ordered = sorted(cosines, reverse=True)[: band + 1]
    if len(ordered) < 3:
        return None
    mean = statistics.fmean(ordered[1:])
    return (ordered[0] - mean) / max(1.0 - mean, 1e-6)


def query_matched(
    cosines: Sequence[float],
    keyword: Sequence[float],
    *,
    keyword_match: float = KEYWORD_MATCH,
    margin: float = DENSE_MARGIN,
) -> Verdict:
    """The verdict from the vector lane's cosines and the keyword lane's scores (either may be
    empty). A keyword-only search, or one over fewer than three units (no band to stand out
    from), matched when the keyword lane found anything."""
    best = max(keyword, default=0.0)
    m = dense_margin(cosines) if cosines else None
    matched = best >= keyword_match or (m is not None and m >= margin)
    if m is None:  # keyword-only, or a base too small for a band: any keyword hit, as BM25
        matched = best > 0
    return Verdict(matched, best, m)


def default_cut(
    scored: Sequence[tuple[Any, float, str]], lexical: set[str], verdict: Verdict | None
) -> list[tuple[Any, float, str]]:
    """``(hit, score, kind)`` kept when the base sets no threshold: nothing when the query did
    not match; else hits the keyword lane found, hits of other kinds (``rrf``, ``keyword``,
    ``relevance``), and hybrid and vector hits from :data:`FLOOR` up."""
    absolute = ("hybrid", "vector")
    if verdict is not None and not verdict.matched and any(t[2] in absolute for t in scored):
        return []
    return [t for t in scored if t[2] not in absolute or t[0].unit_id in lexical or t[1] >= FLOOR]


__all__ = [
    "BAND",
    "DENSE_MARGIN",
    "FLOOR",
    "KEYWORD_MATCH",
    "Verdict",
    "default_cut",
    "dense_margin",
    "query_matched",
]
