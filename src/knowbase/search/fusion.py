"""Fusing the keyword and vector lanes: RRF (the origin's) or convex, as base settings.

``convex`` (the default): ``score = α · cosine + (1 − α) · keyword`` on the lanes' absolute
scales — the dense lane's cosine similarity, calibrated per model (:mod:`.calibration`: the
model's unrelated band to 0; below 0 counts as 0) and the keyword lane's BM25 over
the query's own upper bound (:mod:`knowbase.index.keyword_scale`, in [0, 1)); a hit
missing from a lane gets 0 there (Bruch et al., "An Analysis of Fusion Functions for Hybrid
Retrieval", TOIS 2023, with a theoretical-bound scaling instead of per-query min–max). No score
depends on the other hits of the query, so a threshold cuts the same way on every query and a
multi-base search merges on one scale (:mod:`.multi_base`); a query that matches nothing
lexically and nothing closely scores low everywhere. ``rrf``:
``score = α / (k + rank_vector) + (1 − α) / (k + rank_keyword)`` (Cormack et al. 2009; the
origin runs k = 60, α = 0.5) — ranks, not an absolute scale.

The dense lane's vote is ``α × dense_weight``, where ``dense_weight`` comes from the script rule
(:func:`dense_weight`): 0 where the model cannot read the query. A lane whose weight is 0 casts
no vote and its hits do not enter the fused list, so ``α = 1`` is the vector lane alone and
``α = 0`` the keyword lane alone, under either method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from knowbase.catalog import base_settings
from knowbase.errors import InvalidInput
from knowbase.search.rrf import K as RRF_K
from knowbase.search.rrf import rrf_fuse

FusionMethod = Literal["rrf", "convex"]
METHODS: tuple[str, ...] = base_settings.BY_NAME["fusion"].choices or ()
# Picked with ``bench/judged_sets.py`` on four kinds of judged sets — eval/en (MiniLM), eval/zh
# (e5), NFCorpus dev, an ArguAna cut (MiniLM) — with each model's cosines calibrated before
# fusion (``search/calibration.py``, issue 40): convex α = 0.4 on the absolute scales is within
# 0.01 nDCG@10 of each set's best setting (losses 0.003 / 0.001 / 0.008 / 0.010; α 0.5 loses
# 0.014 on ArguAna). Table: docs/eval.md. New bases get these (declared in
# catalog/base_settings.py); old ones keep theirs.
DEFAULT_METHOD: FusionMethod = base_settings.default("fusion")
DEFAULT_ALPHA: float = base_settings.default("fusion_alpha")
# Dense vote by script coverage (DESIGN, Turn 2): full weight when at least this share of the
# query's letters are in scripts the model reads, none below.
FULL_COVERAGE = 0.9


@dataclass(frozen=True)
class FusionSettings:
    """How a hybrid search merges its lanes. ``alpha`` is the vector lane's weight."""

    method: FusionMethod = DEFAULT_METHOD
    alpha: float = DEFAULT_ALPHA
    rrf_k: int = RRF_K

    def __post_init__(self) -> None:
        validate(self.method, self.alpha, self.rrf_k)

    @classmethod
    def of_base(cls, base: Any) -> FusionSettings:
        """The settings a catalog ``Base`` row holds (older rows without them: the defaults)."""
        return cls(
            method=getattr(base, "fusion", None) or DEFAULT_METHOD,
            alpha=_or(getattr(base, "fusion_alpha", None), DEFAULT_ALPHA),
            rrf_k=_or(getattr(base, "rrf_k", None), RRF_K),
        )

    def label(self) -> str:
        if self.method == "rrf":
            return f"rrf(k={self.rrf_k}, α={self.alpha:g})"
        return f"convex(α={self.alpha:g})"


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def validate(method: Any, alpha: Any, rrf_k: Any) -> None:
    """Raise InvalidInput for a method other than rrf/convex, α outside [0, 1], or k < 1."""
    if method is not None and method not in METHODS:
        raise InvalidInput("fusion must be 'rrf' or 'convex'", field="fusion", value=method)
    if alpha is not None and not (isinstance(alpha, int | float) and 0.0 <= alpha <= 1.0):
        raise InvalidInput("fusion_alpha must be between 0 and 1", field="fusion_alpha")
    if rrf_k is not None and not (isinstance(rrf_k, int) and rrf_k >= 1):
        raise InvalidInput("rrf_k must be a positive integer", field="rrf_k", value=rrf_k)


def dense_weight(coverage: dict[str, Any]) -> float:
    """1.0 when ≥ 90% of the query's letters are in the model's scripts (or it has none), else 0.

    ``coverage`` is :func:`knowbase.search.coverage.script_coverage`'s answer.
    """
    letters = coverage.get("letters", 0)
    if not letters:
        return 1.0
    covered = letters - coverage.get("uncovered", 0)
    return 1.0 if covered >= FULL_COVERAGE * letters else 0.0


def fuse(
    vector: list[tuple[str, float]],
    keyword: list[tuple[str, float]],
    settings: FusionSettings,
    *,
    dense: float = 1.0,
) -> list[tuple[str, float]]:
    """Merge two lanes of ``(id, score)`` (best first; higher score is better) into one list.

    ``dense`` scales the vector lane's weight (the script rule). Ties break by the best rank the
    id reached in a voting lane, then by id, so the output is deterministic.

    >>> s = FusionSettings(method="convex", alpha=0.5)
    >>> fuse([("a", 0.9), ("b", 0.5)], [("b", 0.6), ("c", 0.3)], s)
    [('b', 0.55), ('a', 0.45), ('c', 0.15)]
    """
    wv = settings.alpha * dense
    wk = 1.0 - settings.alpha
    lanes = [(hits, w) for hits, w in ((vector, wv), (keyword, wk)) if w > 0]
    if settings.method == "rrf":
        return rrf_fuse([([i for i, _ in hits], w) for hits, w in lanes], k=settings.rrf_k)
    scores: dict[str, float] = {}
    best: dict[str, int] = {}
    for hits, weight in lanes:
        seen: set[str] = set()
        for rank, (item, score) in enumerate(hits, start=1):
            if item in seen:  # an id repeated keeps its first score
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + weight * min(1.0, max(0.0, float(score)))
            best[item] = min(best.get(item, rank), rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))


def score_kind(mode: str, settings: FusionSettings) -> str:
    """What a search's ranking scores are: ``hybrid`` (convex, absolute), ``vector`` (convex at
    α = 1: the cosine), ``keyword`` (the keyword lane alone, absolute) or ``rrf`` (ranks)."""
    if mode != "hybrid":
        return "keyword"
    if settings.method == "rrf":
        return "rrf"
    return "vector" if settings.alpha >= 1.0 else "hybrid"
