"""``kb eval``: score a base's lanes on judged queries (BEIR layout), side by side.

Lanes: ``bm25`` (the keyword lane as a BM25-only base runs it), ``vector`` (the dense lane
alone, straight from the store: no script rule, so it shows what the rule guards against),
``hybrid`` (the base's fusion settings, no reranker) and ``hybrid+rerank`` (when the base has
a reranker). Every lane keeps only visible (completed) items; chunk hits collapse to documents by
their best chunk (its score is the document's), the first 100 documents count. A hit's document
id is its Concept ID when the qrels judge that, else the BEIR id :func:`.beir.doc_id_of`
reads back from it (bases built by ``kb import-beir``).

:func:`sweep` re-runs the hybrid lane over a small grid of fusion settings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowbase.errors import InvalidInput, KnowbaseError
from knowbase.eval.beir import doc_id_of
from knowbase.eval.context import EvalContext, serving_context
from knowbase.eval.metrics import evaluate_run
from knowbase.eval.shadow import shadow_context
from knowbase.search.fusion import FusionSettings
from knowbase.search.search import MAX_CANDIDATES, SearchConfig, search

DEPTH = 100  # documents per query in a run (recall@100)
LANE_CHUNKS = MAX_CANDIDATES  # chunk hits asked of a lane before collapsing to documents

Run = dict[str, dict[str, float]]

SWEEP_GRID: tuple[FusionSettings, ...] = (
    *(FusionSettings("rrf", a, k) for k in (20, 60) for a in (0.3, 0.5, 0.7, 0.9)),
    *(FusionSettings("convex", a) for a in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)),
)


@dataclass
class LaneReport:
    """One lane's figures: means over the judged queries and each query's."""

    lane: str
    settings: str
    metrics: dict[str, float]
    per_query: dict[str, dict[str, float]]
    run: Run = field(repr=False, default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "lane": self.lane,
            "settings": self.settings,
            "metrics": self.metrics,
            "per_query": self.per_query,
        }


def context_for(
    rt: Any,
    visible: Callable[[set[str]], Mapping[str, Any]],
    b: Any,
    qrels: Mapping[str, Mapping[str, int]],
    *,
    model: str | None = None,
) -> EvalContext:
    """The lanes' inputs for base ``b`` from a runtime (``Knowledge.eval_context`` calls it).
    ``model="shadow"`` scores the vectors of a model switch in progress
    (:mod:`.shadow`); None, the model the base serves."""
    from knowbase.catalog.guards import assert_base_runnable

    if model is not None and model != "shadow":
        raise InvalidInput("--model takes 'shadow' (or nothing: the serving model)", model=model)
    assert_base_runnable(b, "searching")
    missing = missing_judged(rt, b, {d for judged in qrels.values() for d in judged})
    if model == "shadow":
        ctx = shadow_context(rt, visible, b, qrels)
        ctx.missing = missing
        return ctx
    ctx = serving_context(rt, visible, b, qrels)
    ctx.missing = missing
    return ctx


def missing_judged(rt: Any, b: Any, judged: set[str]) -> set[str]:
    """The judged document ids that no document of ``b`` answers to (by Concept ID or BEIR
    id); InvalidInput when that is all of them: every metric would be 0.0 and say nothing
    (qrels of another corpus, or ids that are not the base's Concept IDs)."""
    from knowbase.catalog import items as item_repo

    with rt.catalog.read() as conn:
        cids = [
            i.concept_id
            for i in item_repo.list_items(conn, b.id, statuses=["completed"])
            if i.concept_id
        ]
    missing = judged - set(cids) - {doc_id_of(c) for c in cids}
    if judged and missing == judged:
        example = sorted(judged)[0]
        held = f"e.g. {sorted(cids)[0]!r}" if cids else "it holds no documents"
        raise InvalidInput(
            f"none of the {len(judged)} judged document ids is in base {b.name!r} (e.g. "
            f"{example!r}); the qrels name documents by Concept ID ({held}) or by the BEIR "
            "id kb import-beir keeps",
            base=b.name,
        )
    return missing


def lanes_of(ctx: EvalContext) -> list[str]:
    out = ["bm25"]
    if ctx.embedder is not None and ctx.dims:
        out += ["vector", "hybrid"]
        if ctx.reranker is not None:
            out.append("hybrid+rerank")
    elif ctx.reranker is not None:
        out.append("bm25+rerank")
    return out


def _doc_key(concept_id: str, judged: set[str]) -> str:
    if concept_id in judged:
        return concept_id
    decoded = doc_id_of(concept_id)
    return decoded if decoded in judged else concept_id


def _collapse(hits: Iterable[tuple[str | None, float]], judged: set[str]) -> dict[str, float]:
    """Best chunk per document (hits come best first), the first ``DEPTH`` documents."""
    docs: dict[str, float] = {}
    for concept_id, score in hits:
        if concept_id is None:
            continue
        key = _doc_key(concept_id, judged)
        if key not in docs:
            docs[key] = float(score)
            if len(docs) == DEPTH:
                break
    return docs


def run_lane(
    ctx: EvalContext,
    lane: str,
    queries: Mapping[str, str],
    fusion: FusionSettings | None = None,
) -> Run:
    """``{query id: {doc id: score}}`` for one lane. A query search refuses gets no hits."""
    run: Run = {}
    for qid, text in queries.items():
        try:
            run[qid] = _collapse(_lane_hits(ctx, lane, text, fusion or ctx.fusion), ctx.judged)
        except KnowbaseError:  # no searchable tokens, bad length: a query with no hits
            run[qid] = {}
    return run


def _lane_hits(
    ctx: EvalContext, lane: str, text: str, fusion: FusionSettings
) -> list[tuple[str | None, float]]:
    if lane == "vector":
        return _vector_hits(ctx, text)
    hybrid = lane.startswith("hybrid")
    response = search(
        ctx.store,
        text,
        # distinct=False: a judged set scores every document, duplicates too (trec_eval)
        config=SearchConfig(
            top_k=LANE_CHUNKS, threshold=0.0, dims=ctx.dims, fusion=fusion, distinct=False
        ),
        embedder=ctx.embedder if hybrid else None,
        reranker=ctx.reranker if lane.endswith("+rerank") else None,
        visible=ctx.visible,  # type: ignore[arg-type]
    )
    return [(r.concept_id, r.score) for r in response.results]


def _vector_hits(ctx: EvalContext, text: str) -> list[tuple[str | None, float]]:
    q = text.strip()
    if not q:
        return []
    embed = getattr(ctx.embedder, "embed_queries", None) or ctx.embedder.embed
    vector = np.asarray(embed([q]), dtype=np.float32)[0]
    hits = ctx.store.vector_search(vector, LANE_CHUNKS)
    shown = ctx.visible({h.material_id for h in hits})
    return [(h.relative_path, h.score) for h in hits if h.material_id in shown]


def evaluate(
    ctx: EvalContext,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    lanes: Iterable[str] | None = None,
) -> list[LaneReport]:
    """Each lane's figures over the judged queries (those with a relevant document)."""
    asked = {q: t for q, t in queries.items() if q in qrels}
    out = []
    for lane in lanes or lanes_of(ctx):
        run = run_lane(ctx, lane, asked)
        means, per_query = evaluate_run(run, qrels)
        label = ctx.fusion.label() if lane.startswith("hybrid") else lane
        out.append(LaneReport(lane, label, means, per_query, run))
    return out


def sweep(
    ctx: EvalContext,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    grid: Iterable[FusionSettings] = SWEEP_GRID,
) -> list[LaneReport]:
    """The hybrid lane (no reranker) under each fusion setting of ``grid``."""
    asked = {q: t for q, t in queries.items() if q in qrels}
    out = []
    for setting in grid:
        means, per_query = evaluate_run(run_lane(ctx, "hybrid", asked, setting), qrels)
        out.append(LaneReport("hybrid", setting.label(), means, per_query))
    return out
