"""search/fusion.py: RRF and convex fusion, the weight-0 rule, the dense vote by script coverage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowbase.errors import InvalidInput
from knowbase.index.base import MaterialInput
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.search.coverage import script_coverage
from knowbase.search.fusion import FusionSettings, dense_weight, fuse
from knowbase.search.search import SearchConfig, VisibleItem, search
from knowbase.units.chunk import Chunk
from knowbase.units.hashing import text_hash

CONVEX = FusionSettings(method="convex", alpha=0.5)
RRF = FusionSettings(method="rrf", alpha=0.5, rrf_k=60)


def test_convex_hand_computed() -> None:
    # absolute scales: cosine as it is (below 0 → 0), keyword score as it is; missing → 0
    out = dict(fuse([("a", 0.9), ("b", 0.5), ("c", -0.2)], [("b", 0.6), ("d", 0.3)], CONVEX))
    assert out == pytest.approx({"a": 0.45, "b": 0.55, "c": 0.0, "d": 0.15})
    ranked = [i for i, _ in fuse([("a", 0.9), ("b", 0.5), ("c", 0.1)], [("b", 0.6)], CONVEX)]
    assert ranked[:2] == ["b", "a"]


def test_convex_scores_do_not_depend_on_the_other_hits() -> None:
    """No per-query min-max: a weak best hit stays weak (it was 1.0 under min-max)."""
    alone = dict(fuse([("a", 0.2)], [("a", 0.1)], CONVEX))
    beside = dict(fuse([("b", 0.9), ("a", 0.2)], [("b", 0.8), ("a", 0.1)], CONVEX))
    assert alone["a"] == pytest.approx(beside["a"]) == pytest.approx(0.15)


def test_convex_alpha_weights_lanes() -> None:
    vec, kw = [("a", 1.0), ("b", 0.0)], [("b", 1.0), ("a", 0.0)]
    assert fuse(vec, kw, FusionSettings("convex", alpha=0.8))[0] == ("a", pytest.approx(0.8))
    assert fuse(vec, kw, FusionSettings("convex", alpha=0.2))[0] == ("b", pytest.approx(0.8))


def test_convex_equal_scores_break_by_best_rank_then_id() -> None:
    out = dict(fuse([("a", 0.3)], [("b", 0.6), ("c", 0.6)], CONVEX))
    assert out == pytest.approx({"a": 0.15, "b": 0.3, "c": 0.3})
    assert [i for i, _ in fuse([("a", 0.3)], [("c", 0.3), ("b", 0.3)], CONVEX)] == ["a", "c", "b"]


def test_rrf_hand_computed_with_k_and_alpha() -> None:
    out = dict(fuse([("a", 0.9), ("b", 0.1)], [("b", 5.0)], FusionSettings("rrf", 0.25, 10)))
    assert out == pytest.approx({"a": 0.25 / 11, "b": 0.25 / 12 + 0.75 / 11})


@pytest.mark.parametrize("method", ["rrf", "convex"])
def test_weight_zero_lane_casts_no_vote(method: str) -> None:
    vec, kw = [("a", 0.9), ("b", 0.1)], [("c", 5.0), ("a", 1.0)]
    assert [i for i, _ in fuse(vec, kw, FusionSettings(method, alpha=1.0))] == ["a", "b"]
    assert [i for i, _ in fuse(vec, kw, FusionSettings(method, alpha=0.0))] == ["c", "a"]
    assert [i for i, _ in fuse(vec, kw, FusionSettings(method, alpha=0.7), dense=0.0)] == ["c", "a"]


def test_settings_refuse_bad_values() -> None:
    for bad in [dict(method="max"), dict(alpha=1.5), dict(alpha=-0.1), dict(rrf_k=0)]:
        with pytest.raises(InvalidInput):
            FusionSettings(**bad)  # type: ignore[arg-type]


lanes = st.lists(
    st.tuples(st.sampled_from("abcdefgh"), st.floats(-1, 1, allow_nan=False)), max_size=8
)


@given(lanes, lanes, st.sampled_from(["rrf", "convex"]), st.floats(0, 1), st.integers(1, 100))
def test_fusion_invariants(vec, kw, method, alpha, k) -> None:  # type: ignore[no-untyped-def]
    s = FusionSettings(method, alpha, k)
    out = fuse(vec, kw, s)
    ids = [i for i, _ in out]
    assert len(ids) == len(set(ids))  # each id once
    voting = ({i for i, _ in vec} if alpha > 0 else set()) | (
        {i for i, _ in kw} if alpha < 1 else set()
    )
    assert set(ids) == voting
    scores = [sc for _, sc in out]
    assert scores == sorted(scores, reverse=True)
    if method == "convex":
        assert all(-1e-9 <= sc <= 1 + 1e-9 for sc in scores)
    assert fuse(vec, kw, s) == out  # deterministic


def test_dense_weight_follows_coverage() -> None:
    latin = frozenset({"Latin"})
    assert dense_weight(script_coverage("machine learning", latin)) == 1.0
    assert dense_weight(script_coverage("2024", latin)) == 1.0
    assert dense_weight(script_coverage("Visual Studio Code的默认快捷键是什么", latin)) == 0.0
    assert dense_weight(script_coverage("abcdefghi 学", latin)) == 1.0  # 90% exactly


class Words:
    """Vector = counts of two words; the model reads Latin only."""

    model_id = "test:words"
    scripts = frozenset({"Latin"})

    def __init__(self) -> None:
        self.calls: list[str] = []

    def embed(self, texts):  # type: ignore[no-untyped-def]
        self.calls.extend(texts)
        return np.array([[t.count("cat"), t.count("dog")] for t in texts], dtype=np.float32)


def _everything(ids: set[str]) -> dict[str, VisibleItem]:
    return {i: VisibleItem(i, "note", i, i) for i in ids}


@pytest.mark.parametrize("fusion", [CONVEX, RRF, FusionSettings("convex", alpha=1.0)])
def test_no_dense_vote_on_uncovered_script_under_every_fusion(
    tmp_path: Path, fusion: FusionSettings
) -> None:
    store = SqliteIndexStore.open(tmp_path / "i.sqlite", base_id="b", dims=2)
    try:
        for mid, text in {"zh": "机器学习的默认设置", "en": "cat cat dog"}.items():
            store.rebuild_material(
                MaterialInput(mid, f"{mid}.md", text, [Chunk(text, 0, len(text), 0)]),
                {text_hash(text): Words().embed([text])[0]},
            )
        emb = Words()
        config = SearchConfig(dims=2, fusion=fusion)
        r = search(store, "Code的默认设置", config=config, embedder=emb, reranker=None,
                   visible=_everything)  # fmt: skip
        assert r.mode == "bm25" and emb.calls == []
        assert [x.item_id for x in r.results] == ["zh"]
        r = search(store, "cat", config=config, embedder=emb, reranker=None, visible=_everything)
        assert r.mode == "hybrid" and r.explain["fusion"]["method"] == fusion.method
        assert r.results[0].item_id == "en"
    finally:
        store.close()
