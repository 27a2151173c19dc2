"""eval/metrics.py against hand-computed cases and against trec_eval (pytrec_eval)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowbase.eval.metrics import (
    evaluate_run,
    mrr_at_k,
    ndcg_at_k,
    order_run,
    query_metrics,
    recall_at_k,
)


def test_graded_ndcg_uses_linear_gain() -> None:
    qrels = {"a": 2, "b": 1, "c": 0}
    ranked = ["c", "a", "x", "b"]
    # DCG = 2/log2(3) + 1/log2(5); ideal = 2/log2(2) + 1/log2(3)
    assert ndcg_at_k(ranked, qrels) == pytest.approx(0.6433224083306327)
    # with 2^rel − 1 it would be (3/log2 3 + 1/log2 5) / (3 + 1/log2 3) = 0.6222…: not ours
    assert ndcg_at_k(ranked, qrels) != pytest.approx(
        (3 / math.log2(3) + 1 / math.log2(5)) / (3 + 1 / math.log2(3))
    )
    assert recall_at_k(ranked, qrels, 10) == 1.0
    assert recall_at_k(ranked, qrels, 2) == 0.5
    assert mrr_at_k(ranked, qrels) == 0.5


def test_cut_at_k() -> None:
    qrels = {"r": 1}
    ranked = [f"n{i:02d}" for i in range(10)] + ["r"]
    assert ndcg_at_k(ranked, qrels) == 0.0 and mrr_at_k(ranked, qrels) == 0.0
    assert recall_at_k(ranked, qrels, 10) == 0.0 and recall_at_k(ranked, qrels, 100) == 1.0


def test_ties_break_by_doc_id_descending_like_trec_eval() -> None:
    assert order_run({"a": 1.0, "b": 1.0, "c": 0.5, "d": 2.0}) == ["d", "b", "a", "c"]
    m = query_metrics(order_run({"a": 1.0, "b": 1.0}), {"a": 1})
    assert m["mrr@10"] == 0.5 and m["ndcg@10"] == pytest.approx(1 / math.log2(3))


def test_query_without_hits_scores_zero_and_unjudged_queries_are_skipped() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 2}, "q3": {"c": 0}}
    means, per = evaluate_run({"q1": {"a": 3.0}}, qrels)
    assert set(per) == {"q1", "q2"}  # q3 has nothing relevant: not evaluated
    assert per["q2"] == {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    assert per["q1"]["ndcg@10"] == 1.0
    assert means["ndcg@10"] == 0.5 and means["mrr@10"] == 0.5


docs = st.sampled_from([f"d{i}" for i in range(15)])
qrels_st = st.dictionaries(docs, st.integers(-1, 3), min_size=1, max_size=10)
run_st = st.dictionaries(docs, st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0]), max_size=15)


@given(run_st, qrels_st)
def test_metric_bounds_and_ideal(run, qrels) -> None:  # type: ignore[no-untyped-def]
    ranked = order_run(run)
    m = query_metrics(ranked, qrels)
    assert all(0.0 <= v <= 1.0 + 1e-12 for v in m.values())
    assert recall_at_k(ranked, qrels, 10) <= recall_at_k(ranked, qrels, 100)
    ideal = sorted(qrels, key=lambda d: -qrels[d])
    if any(g > 0 for g in qrels.values()):
        assert ndcg_at_k(ideal, qrels) == pytest.approx(1.0)
        assert mrr_at_k(ideal, qrels) == 1.0


qids = st.sampled_from(["q1", "q2", "q3"])


@given(st.dictionaries(qids, run_st, max_size=3), st.dictionaries(qids, qrels_st, min_size=1))
def test_equals_trec_eval(run, qrels) -> None:  # type: ignore[no-untyped-def]
    pytrec_eval = pytest.importorskip("pytrec_eval")
    _, ours = evaluate_run(run, qrels)
    # -c: judged queries without hits count (pytrec_eval skips queries absent from the run)
    full = {q: run.get(q) or {"__none__": -1e9} for q in qrels}
    ev = pytrec_eval.RelevanceEvaluator(
        {q: dict(j) for q, j in qrels.items()}, {"ndcg_cut.10", "recall.10", "recall.100"}
    )
    theirs = ev.evaluate(full)
    for q, m in ours.items():
        assert m["ndcg@10"] == pytest.approx(theirs[q]["ndcg_cut_10"], abs=1e-4)
        assert m["recall@10"] == pytest.approx(theirs[q]["recall_10"], abs=1e-4)
        assert m["recall@100"] == pytest.approx(theirs[q]["recall_100"], abs=1e-4)
