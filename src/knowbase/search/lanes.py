"""The lanes of one search: which run (hybrid or keyword-only, and why), and a hybrid
search's two lanes and their fusion into one candidate list."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from knowbase.index.base import IndexStore, LaneHit
from knowbase.providers.base import EmbeddingProvider
from knowbase.search.calibration import calibrate_hits
from knowbase.search.coverage import script_coverage
from knowbase.search.fusion import FusionSettings, dense_weight, fuse
from knowbase.search.matched import Verdict, query_matched

MAX_LANE = 1000
# Keyword lanes that run while the query is embedded (one per concurrent hybrid search).
_LANES = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kb-keyword-lane")

Mode = Literal["hybrid", "bm25"]


def choose_mode(
    q: str,
    dims: int | None,
    embedder: EmbeddingProvider | None,
    fusion: FusionSettings,
    explain: dict[str, Any],
) -> tuple[Mode, dict[str, Any]]:
    """Hybrid when the base has vectors, the model reads the query's script and the fusion
    hears the dense lane; else keyword-only, with the reason in ``explain``. Also the query's
    script coverage (the dense lane's weight)."""
    mode: Mode = "hybrid" if embedder is not None and dims else "bm25"
    coverage: dict[str, Any] = {}
    if embedder is not None and not dims:
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
    if mode == "hybrid" and fusion.alpha == 0:
        mode = "bm25"
        explain["dense_lane"] = {"used": False, "reason": "fusion_alpha_zero"}
    explain["mode"] = mode
    return mode, coverage


@dataclass
class HybridLanes:
    """Both lanes of one hybrid search and their fusion."""

    store: IndexStore
    q: str
    embedder: EmbeddingProvider
    dims: int
    within: set[str] | None

    def rank(
        self,
        fusion: FusionSettings,
        coverage: dict[str, Any],
        candidates: int,
        lane_limit: int,
        explain: dict[str, Any],
    ) -> tuple[list[tuple[LaneHit, float]], set[str], Verdict]:
        """The fused candidates, the keyword lane's hits, and whether the query matched."""
        # The dense lane's modules load numpy, which a BM25-only search never needs.
        from knowbase.search.lane_gaps import cosines_for_missed

        vector, vhits, khits = self._lanes(lane_limit)
        verdict = query_matched([h.score for h in vhits], [h.score for h in khits])
        explain["matched"] = verdict.explain()
        vhits += cosines_for_missed(self.store, vector, vhits, khits, self.within, MAX_LANE)
        vhits = calibrate_hits(vhits, self.embedder.model_id)  # one scale for every model
        lane: dict[str, LaneHit] = {}
        for h in [*vhits, *khits]:
            lane.setdefault(h.unit_id, h)
        fused = fuse(
            [(h.unit_id, h.score) for h in vhits],
            [(h.unit_id, h.score) for h in khits],
            fusion,
            dense=dense_weight(coverage),
        )[:candidates]
        explain["dense_lane"] = {"used": True, "hits": len(vhits)}
        explain["fusion"] = {"method": fusion.method, "alpha": fusion.alpha, "rrf_k": fusion.rrf_k}
        explain["lanes"] = {"vector": len(vhits), "keyword": len(khits), "lane_limit": lane_limit}
        return [(lane[uid], score) for uid, score in fused], {h.unit_id for h in khits}, verdict

    def _lanes(self, limit: int) -> tuple[Any, list[LaneHit], list[LaneHit]]:
        # Embed and run the vector lane on this thread (the model's) while a pool thread runs
        # the keyword lane: torch, numpy and SQLite all release the GIL, so on two cores the
        # keyword lane costs no extra wall time (with a cached query vector either).
        from knowbase.pipeline.indexing.embed import cached_query, embed_query

        keyword = _LANES.submit(self.store.keyword_lane, self.q, limit, within=self.within)
        try:
            vector = cached_query(self.q, self.embedder, self.dims)
            if vector is None:
                vector = embed_query(self.q, self.embedder, self.dims)
            vhits = self.store.vector_lane(vector, limit, within=self.within)
        finally:
            khits = keyword.result()
        return vector, vhits, khits
