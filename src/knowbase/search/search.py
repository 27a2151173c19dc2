"""Hybrid search over one base's index with visibility filtering (§7).

Steps, in order: trim and bound the query (1..1000 chars); refuse a query without tokens before
any embedding; derive the mode (``hybrid`` iff an embedder is given and the base has dims — and
the model reads at least 90% of the query's letters, see :func:`script_coverage`); run the lanes,
each restricted to the search filters' materials (``scope``, :mod:`.scope`) before its cut; fuse
them by the base's fusion settings (``search/fusion.py``: RRF or convex, α, k); keep only hits of
visible items (completed, or re-indexed in place); read text and locators of the hits kept (the
lanes return ids and scores only; once more from the lanes when a re-index swapped a hit's units
meanwhile); order equal scores by Concept ID and unit order (the same after an export and
import, where ids change); rerank before the trim; trim to ``top_k``; apply the threshold; number
ranks from 1.

Scores and ``score_kind`` (:func:`knowbase.search.fusion.score_kind`): ``hybrid`` (convex
fusion of the cosine, calibrated per model by :mod:`.calibration`, and the keyword lane's
absolute score), ``keyword`` (the keyword lane alone: a BM25-only base, or a query the model
cannot read), ``vector`` (convex at α = 1), all three on one
absolute scale in [0, 1]; ``rrf`` (rank fusion: ranks, no absolute meaning) and ``relevance`` (a
reranker's). A base's own threshold cuts absolute and ``relevance`` scores. Without one, the
search decides once per query whether it matched the base at all (:mod:`.matched`: the keyword
lane's coverage, the dense lane's margin over the query's band): a query that did not returns
nothing; one that did keeps its list down to :data:`~knowbase.search.matched.FLOOR` for hybrid
and vector hits the keyword lane did not find, and every hit that matches a word, as BM25
always did. ``rrf`` scores are never cut.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from knowbase.errors import InvalidInput, NoSearchableTokens
from knowbase.index.base import IndexStore, LaneHit, SearchHit
from knowbase.index.fts_query import build_keyword_query, extract_tokens
from knowbase.providers.base import EmbeddingProvider, RerankProvider
from knowbase.search.calibration import calibrate_hits
from knowbase.search.coverage import script_coverage  # re-exported: callers import it here
from knowbase.search.fusion import FusionSettings, dense_weight, fuse, score_kind
from knowbase.search.matched import FLOOR, Verdict, default_cut, query_matched
from knowbase.search.scope import Scope

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 1000
DEFAULT_TOP_K = 10
DEFAULT_RERANK_TOP_N = 6  # the origin's DEFAULT_DOCUMENT_COUNT, deliberately not 10
MAX_CANDIDATES = 200
MAX_LANE = 1000
#: Runs of one search at most while re-indexes swap its hits' units under it (see search()).
#: A group commit swaps a batch of documents one index transaction each, back to back, so a
#: search inside that burst can lose a hit on several runs in a row: with 3 runs about 1 in 20
#: runs of tests/operations/test_ingestion_sync_visibility.py still lost a document, with 6
#: none of 25.
SWAP_RUNS = 6
# Keyword lanes that run while the query is embedded (one per concurrent hybrid search).
_LANES = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kb-keyword-lane")

Mode = Literal["hybrid", "bm25"]
ScoreKind = Literal["hybrid", "keyword", "vector", "rrf", "relevance"]
ABSOLUTE: frozenset[str] = frozenset({"hybrid", "keyword", "vector"})
# Reported as the default threshold: without a base threshold, hybrid and vector hits the
# keyword lane did not find are kept from this score up in a query that matched (.matched).
DEFAULT_THRESHOLD = FLOOR


@dataclass(frozen=True)
class SearchConfig:
    """Per-call knobs: ``top_k`` (None → 10), ``threshold`` (None → :data:`DEFAULT_THRESHOLD`
    on absolute scores; 0 cuts nothing), the base's ``dims``, how the lanes are fused (None
    → the defaults of ``search/fusion.py``), and ``distinct`` (identical passages once)."""

    top_k: int | None = None
    threshold: float | None = None
    dims: int | None = None
    fusion: FusionSettings | None = None
    # one result per passage text; False for judged runs, which score every document
    distinct: bool = True


@dataclass(frozen=True)
class VisibleItem:
    """A searchable item of this base, as the catalog shows it."""

    item_id: str
    item_type: str
    title: str | None
    source: str | None


@dataclass(frozen=True)
class SearchResult:
    rank: int
    chunk_id: str
    item_id: str
    concept_id: str | None
    title: str | None
    item_type: str
    source: str | None
    score: float
    score_kind: ScoreKind
    text: str
    unit_index: int
    char_start: int
    char_end: int
    locator: dict[str, Any] = field(default_factory=dict)
    # with ``context`` (:mod:`.context`): the hit's own offsets and the chunks merged into it
    context: dict[str, Any] | None = None
    # the part worth reading, centred on the best-matching lines (:mod:`.snippet`)
    snippet: dict[str, Any] | None = None
    # with ``group="document"`` (:mod:`.grouping`): the document's best passages, best first
    citations: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class SearchResponse:
    results: list[SearchResult]
    mode: Mode
    explain: dict[str, Any]


def _validate(query: str, top_k: int | None) -> tuple[str, int]:
    q = query.strip()
    if not 1 <= len(q) <= MAX_QUERY_CHARS:
        raise InvalidInput(
            f"query must be 1..{MAX_QUERY_CHARS} characters after trimming",
            query=[f"length {len(q)}"],
        )
    if not extract_tokens(q):
        raise NoSearchableTokens(
            "Query has no searchable tokens", query=["Query has no searchable tokens"]
        )
    k = DEFAULT_TOP_K if top_k is None else top_k
    if k < 1:
        raise InvalidInput("top_k must be at least 1", top_k=top_k)
    return q, k


def search(
    store: IndexStore,
    query: str,
    *,
    config: SearchConfig,
    embedder: EmbeddingProvider | None,
    reranker: RerankProvider | None,
    visible: Callable[[set[str]], dict[str, VisibleItem]],
    scope: Scope | None = None,
) -> SearchResponse:
    """Search one base. ``visible`` returns the searchable items of this base among the ids;
    ``scope`` (search filters, :func:`knowbase.search.scope.resolve`) restricts both lanes.

    A document re-indexed while the search runs swaps its units in one transaction; when that
    lands between a lane and the read of its hits' text, the hits' units are gone and the
    search would show nothing of a document that has an old version and a new one. Then the
    search runs again, on the swapped units (at most :data:`SWAP_RUNS` runs in all: an orphan
    vector of an external lane is skipped for good).

    Raises InvalidInput (bad length), NoSearchableTokens (before any embedding) and
    EmbeddingMismatch (query vector of the wrong width). Rerank errors never raise: the
    un-reranked list is returned and ``explain["rerank"]["error"]`` says why.
    """
    args = (store, query, config, embedder, reranker, visible, scope)
    response, lost = _search_once(*args)
    runs = 1
    while lost and runs < SWAP_RUNS:
        response, lost = _search_once(*args)
        runs += 1
    if runs > 1:
        response.explain["runs"] = runs  # units were swapped under the earlier runs
    return response


def _search_once(
    store: IndexStore,
    query: str,
    config: SearchConfig,
    embedder: EmbeddingProvider | None,
    reranker: RerankProvider | None,
    visible: Callable[[set[str]], dict[str, VisibleItem]],
    scope: Scope | None,
) -> tuple[SearchResponse, bool]:
    """:func:`search` once; also whether visible hits lost their units before their text
    was read."""
    q, top_k = _validate(query, config.top_k)
    candidates = min(top_k * 5, MAX_CANDIDATES)
    lane_limit = min(candidates * 5, MAX_LANE)
    explain: dict[str, Any] = {
        "query": q,
        "top_k": top_k,
        "candidate_limit": candidates,
        "keyword": build_keyword_query(q).explain(),
    }
    within = None if scope is None else scope.within
    if scope is not None:
        explain["filters"] = scope.explain()
    mode: Mode = "hybrid" if embedder is not None and config.dims else "bm25"
    if embedder is not None and not config.dims:
        explain["dense_lane"] = {"used": False, "reason": "base_has_no_dims"}
    if mode == "hybrid":
        assert embedder is not None
        coverage = script_coverage(q, embedder.scripts)
        if not coverage["covered"]:
            mode = "bm25"
            explain["dense_lane"] = {
                "used": False,
                "reason": "query_script_not_covered",
                "detail": f"{coverage['uncovered']} of {coverage['letters']} letters are in "
                f"scripts {embedder.model_id} does not read",
                **coverage,
            }
    fusion = config.fusion or FusionSettings()
    if mode == "hybrid" and fusion.alpha == 0:
        mode = "bm25"
        explain["dense_lane"] = {"used": False, "reason": "fusion_alpha_zero"}
    explain["mode"] = mode
    if within is not None and not within:  # the filters allow no material: nothing to rank
        explain["lanes"] = {"skipped": "filters_match_nothing"}
        return SearchResponse(results=[], mode=mode, explain=explain), False

    first = candidates
    lexical: set[str] | None = None  # hybrid: the hits the keyword lane found
    verdict: Verdict | None = None  # hybrid: did the query match the base at all
    if mode == "hybrid":
        # The dense lane's modules load numpy, which a BM25-only search never needs.
        from knowbase.pipeline.indexing.embed import cached_query, embed_query
        from knowbase.search.lane_gaps import cosines_for_missed

        assert embedder is not None and config.dims
        # Embed and run the vector lane on this thread (the model's) while a pool thread runs
        # the keyword lane: torch, numpy and SQLite all release the GIL, so on two cores the
        # keyword lane costs no extra wall time (with a cached query vector either).
        keyword = _LANES.submit(store.keyword_lane, q, lane_limit, within=within)
        try:
            vector = cached_query(q, embedder, config.dims)
            if vector is None:
                vector = embed_query(q, embedder, config.dims)
            vhits = store.vector_lane(vector, lane_limit, within=within)
        finally:
            khits = keyword.result()
        verdict = query_matched([h.score for h in vhits], [h.score for h in khits])
        explain["matched"] = verdict.explain()
        vhits += cosines_for_missed(store, vector, vhits, khits, within, MAX_LANE)
        vhits = calibrate_hits(vhits, embedder.model_id)  # one scale for every model
        lane: dict[str, LaneHit] = {}
        for h in [*vhits, *khits]:
            lane.setdefault(h.unit_id, h)
        lexical = {h.unit_id for h in khits}
        fused = fuse(
            [(h.unit_id, h.score) for h in vhits],
            [(h.unit_id, h.score) for h in khits],
            fusion,
            dense=dense_weight(coverage),
        )[:candidates]
        explain["dense_lane"] = {"used": True, "hits": len(vhits)}
        explain["fusion"] = {"method": fusion.method, "alpha": fusion.alpha, "rrf_k": fusion.rrf_k}
        explain["lanes"] = {"vector": len(vhits), "keyword": len(khits), "lane_limit": lane_limit}
        ranked = [(lane[uid], score) for uid, score in fused]
    else:
        # Without a reranker only top_k hits are shown: ask the lane for that many first and
        # widen to the candidate limit only when hidden items leave a gap (below). The lane's
        # order is total (ties by unit id), so the short list is a prefix of the long one.
        first = candidates if reranker is not None else top_k
        ranked = [(h, h.score) for h in store.keyword_lane(q, first, within=within)]

    # A reranker sees every candidate, so check them all; otherwise only as many as it takes
    # to fill top_k (the catalog lookup is a good part of a search's cost).
    need = len(ranked) if reranker is not None else top_k
    shown, kept, checked, lost = _visible_hits(store, ranked, need, visible)
    distinct = len({_passage_key(h) for h, _ in kept})  # repeats do not fill the page
    if distinct < need and len(ranked) == first < candidates:  # a short BM25 page was full
        ranked = [(h, h.score) for h in store.keyword_lane(q, candidates, within=within)]
        shown, kept, checked, lost = _visible_hits(store, ranked, need, visible)
    if mode == "bm25":
        explain["lanes"] = {"keyword": len(ranked), "lane_limit": candidates}
    explain["hidden"] = checked - len(kept)
    kind: ScoreKind = score_kind(mode, fusion)  # type: ignore[assignment]
    # Python's sort is stable: only equal scores move, into Concept ID and unit order.
    kept.sort(key=lambda t: (-t[1], t[0].relative_path, t[0].unit_index))
    if config.distinct:
        kept = _distinct(kept)
    scored: list[tuple[SearchHit, float, ScoreKind]] = [(h, s, kind) for h, s in kept]

    if reranker is not None and scored:
        scored = _rerank(reranker, q, scored, config.top_k or DEFAULT_RERANK_TOP_N, explain)

    scored = scored[:top_k]
    explain["score_kind"] = scored[0][2] if scored else kind
    scored = _cut(scored, config.threshold, lexical, verdict, explain)
    results = [
        _result(rank, hit, score, kind, shown[hit.material_id])
        for rank, (hit, score, kind) in enumerate(scored, start=1)
    ]
    return SearchResponse(results=results, mode=mode, explain=explain), lost


def _visible_hits(
    store: IndexStore,
    ranked: list[tuple[LaneHit, float]],
    need: int,
    visible: Callable[[set[str]], dict[str, VisibleItem]],
) -> tuple[dict[str, VisibleItem], list[tuple[SearchHit, float]], int, bool]:
    """The first ``need`` hits of ``ranked`` whose items are visible, with their text.

    Text and locators are read for those hits only. A unit deleted since its lane ran (or an
    orphan vector of an external lane) has no text: the walk goes on past it. ``need`` counts
    distinct passages (:func:`_distinct` drops the repeats later). Returns (the visible items,
    the kept hits, how many lane hits were checked, whether a visible hit had no text).
    """
    shown: dict[str, VisibleItem] = {}
    kept: list[tuple[SearchHit, float]] = []
    texts: set[str] = set()
    pos = 0
    lost = False
    while pos < len(ranked) and len(texts) < need:
        more, window, end = _visible_prefix(ranked[pos:], need - len(texts), visible)
        shown.update(more)
        full = store.hits_for([(h.unit_id, s) for h, s in window])
        lost = lost or len(full) < len(window)
        for h in full:
            texts.add(_passage_key(h))
            kept.append((h, h.score))
        pos += end
    return shown, kept, pos, lost


def _passage_key(hit: SearchHit) -> str:
    # The same text at the same place (page, heading, figure…): a file added twice, a licence
    # in every package. The same caption under a figure of two documents is two citations.
    place = ",".join(f"{k}={v}" for k, v in sorted((hit.locator or {}).items()))
    return place + "|" + " ".join(hit.text.split())


def _distinct(kept: list[tuple[SearchHit, float]]) -> list[tuple[SearchHit, float]]:
    """The first of each passage text (after the tie order, so the same one after an export):
    the same file added twice, or a licence in every package, is one result, not two."""
    seen: set[str] = set()
    out = []
    for h, s in kept:
        key = _passage_key(h)
        if key not in seen:
            seen.add(key)
            out.append((h, s))
    return out


def _visible_prefix(
    ranked: list[tuple[LaneHit, float]],
    need: int,
    visible: Callable[[set[str]], dict[str, VisibleItem]],
) -> tuple[dict[str, VisibleItem], list[tuple[LaneHit, float]], int]:
    """Walk ``ranked`` in order, asking ``visible`` about its items a window at a time, until
    ``need`` hits are kept. Returns (the visible items, the kept hits, how many were checked)."""
    shown: dict[str, VisibleItem] = {}
    asked: set[str] = set()
    kept: list[tuple[LaneHit, float]] = []
    pos = 0
    while pos < len(ranked) and len(kept) < need:
        window: set[str] = set()
        end = pos
        # the next hits, up to ``need - len(kept)`` items not asked about yet
        while end < len(ranked) and len(window) < need - len(kept):
            mid = ranked[end][0].material_id
            if mid not in asked:
                window.add(mid)
            end += 1
        while end < len(ranked) and ranked[end][0].material_id in asked | window:
            end += 1  # hits of items already settled cost nothing: take them along
        if window:
            shown.update(visible(window))
            asked |= window
        kept.extend((h, s) for h, s in ranked[pos:end] if h.material_id in shown)
        pos = end
    return shown, kept, pos


def _cut(
    scored: list[tuple[SearchHit, float, ScoreKind]],
    threshold: float | None,
    lexical: set[str] | None,
    verdict: Verdict | None,
    explain: dict[str, Any],
) -> list[tuple[SearchHit, float, ScoreKind]]:
    """Drop hits under the base's threshold (absolute and relevance scores), or without one
    as :func:`knowbase.search.matched.default_cut` decides; ``rrf`` never."""
    if threshold is None:
        value = DEFAULT_THRESHOLD
        kept: list[tuple[SearchHit, float, ScoreKind]]
        kept = default_cut(scored, lexical or set(), verdict)  # type: ignore[assignment]
    else:
        value, kinds = threshold, ABSOLUTE | {"relevance"}
        kept = [t for t in scored if t[2] not in kinds or t[1] >= value]
    explain["threshold"] = {
        "value": value,
        "source": "default" if threshold is None else "base",
        "cut": len(scored) - len(kept),
    }
    return kept


def _rerank(
    reranker: RerankProvider,
    query: str,
    scored: list[tuple[SearchHit, float, ScoreKind]],
    top_n: int,
    explain: dict[str, Any],
) -> list[tuple[SearchHit, float, ScoreKind]]:
    info: dict[str, Any] = {"model_id": getattr(reranker, "model_id", None), "top_n": top_n}
    explain["rerank"] = info
    try:
        chosen = reranker.rerank(query, [h.text for h, _, _ in scored], top_n)
    except Exception as exc:  # any provider failure: keep the fused order (§7 step 8)
        log.warning("rerank failed, keeping the fused order: %s", exc)
        info["error"] = {"code": getattr(exc, "code", type(exc).__name__), "message": str(exc)}
        return scored
    seen: set[int] = set()
    out: list[tuple[SearchHit, float, ScoreKind]] = []
    for r in chosen:
        if 0 <= r.index < len(scored) and r.index not in seen:
            seen.add(r.index)
            out.append((scored[r.index][0], float(r.score), "relevance"))
    out.sort(key=lambda t: -t[1])  # stable: equal scores keep the provider's order
    info["returned"] = len(out)
    return out


def _result(
    rank: int, hit: SearchHit, score: float, kind: ScoreKind, item: VisibleItem
) -> SearchResult:
    return SearchResult(
        rank=rank,
        chunk_id=hit.unit_id,
        item_id=item.item_id,
        concept_id=hit.relative_path or None,
        title=item.title,
        item_type=item.item_type,
        source=item.source,
        score=score,
        score_kind=kind,
        text=hit.text,
        unit_index=hit.unit_index,
        char_start=hit.char_start,
        char_end=hit.char_end,
        locator=dict(hit.locator),
    )
