"""Retrieval metrics with trec_eval's definitions, as pure functions over one query's run.

A run is ``{doc_id: score}`` (higher is better); :func:`order_run` ranks it the way trec_eval
does: by score descending, equal scores by doc id *descending* (``form_res_rels.c``,
``comp_sim_docno``), so figures here equal trec_eval's on the run file ``kb eval --run-out``
writes. Qrels are ``{doc_id: grade}``; a grade ≥ 1 is relevant (trec_eval's default
``relevance_level``), 0 or a negative grade is judged non-relevant.

- ``ndcg_at_k``: trec_eval's ``ndcg_cut.k`` — *linear* gain (gain = grade, not 2^grade − 1),
  discount ``log2(rank + 1)``, divided by the DCG of the ideal order of all judged grades cut
  at k. BEIR reports the same numbers (it calls trec_eval through pytrec_eval).
- ``recall_at_k``: trec_eval's ``recall.k`` — relevant docs in the top k / all relevant docs.
- ``mrr_at_k``: 1 / rank of the first relevant doc within the top k, else 0 (BEIR's MRR@k;
  trec_eval's ``recip_rank`` is the same without the cut).

A query with judged relevant docs but no hits scores 0 on every metric (trec_eval ``-c``);
a query without any relevant doc is not evaluated (trec_eval skips it too).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import fmean

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")


def order_run(scores: Mapping[str, float]) -> list[str]:
    """Doc ids in trec_eval's order: score descending, then doc id descending."""
    by_id = sorted(scores, reverse=True)  # stable sort: the second key first
    return sorted(by_id, key=lambda d: -scores[d])


def _relevant(qrels: Mapping[str, int]) -> set[str]:
    return {d for d, g in qrels.items() if g >= 1}


def dcg(gains: Sequence[float]) -> float:
    """Σ gain_i / log2(i + 1) over 1-based ranks i."""
    return sum(g / math.log2(i + 1) for i, g in enumerate(gains, start=1) if g > 0)


def ndcg_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    """trec_eval ``ndcg_cut.k`` (linear gain). 0.0 when no doc has a positive grade."""
    ideal = dcg(sorted((max(g, 0) for g in qrels.values()), reverse=True)[:k])
    if ideal == 0:
        return 0.0
    return dcg([max(qrels.get(d, 0), 0) for d in ranked[:k]]) / ideal


def recall_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """trec_eval ``recall.k``. 0.0 when nothing is relevant."""
    rel = _relevant(qrels)
    if not rel:
        return 0.0
    return len(rel.intersection(ranked[:k])) / len(rel)


def mrr_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    """1 / rank of the first relevant doc in the top k, else 0."""
    rel = _relevant(qrels)
    for rank, doc in enumerate(ranked[:k], start=1):
        if doc in rel:
            return 1.0 / rank
    return 0.0


def query_metrics(ranked: Sequence[str], qrels: Mapping[str, int]) -> dict[str, float]:
    """The four figures ``kb eval`` reports, for one query."""
    return {
        "ndcg@10": ndcg_at_k(ranked, qrels, 10),
        "recall@10": recall_at_k(ranked, qrels, 10),
        "recall@100": recall_at_k(ranked, qrels, 100),
        "mrr@10": mrr_at_k(ranked, qrels, 10),
    }


def evaluate_run(
    run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]]
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """(mean of each metric, per-query metrics) over the queries with a relevant doc.

    A judged query missing from ``run`` counts as a query with no hits.
    """
    per_query = {
        qid: query_metrics(order_run(run.get(qid, {})), judged)
        for qid, judged in sorted(qrels.items())
        if _relevant(judged)
    }
    means = {m: fmean(q[m] for q in per_query.values()) if per_query else 0.0 for m in METRICS}
    return means, per_query
