"""search() over a real SQLite index with tiny deterministic providers (§7)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from knowbase.errors import (
    EmbeddingMismatch,
    InvalidInput,
    NoSearchableTokens,
    ProviderUnavailable,
)
from knowbase.index.base import MaterialInput
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.providers.base import RerankResult
from knowbase.search.coverage import script_coverage
from knowbase.search.fusion import FusionSettings
from knowbase.search.search import SearchConfig, VisibleItem, search
from knowbase.units.chunk import Chunk
from knowbase.units.hashing import text_hash

VOCAB = ["cat", "dog", "fish", "bird"]


class WordEmbedder:
    """Vector = counts of four words; deterministic, no model."""

    model_id = "test:words"
    dims = len(VOCAB)
    window = None
    scripts = frozenset({"Latin"})
    batch_size = 8

    def __init__(self, width: int = len(VOCAB)) -> None:
        self.calls: list[list[str]] = []
        self.width = width

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.width), dtype=np.float32)
        for i, t in enumerate(texts):
            words = t.lower().replace(".", " ").split()
            for j, w in enumerate(VOCAB[: self.width]):
                out[i, j] = words.count(w)
        return out

    def count_tokens(self, text: str) -> int | None:
        return None


class ListReranker:
    """Returns a fixed list of (index, score), or raises ``error``."""

    model_id = "test:rerank"

    def __init__(self, picks: list[tuple[int, float]], error: Exception | None = None) -> None:
        self.picks = picks
        self.error = error
        self.calls: list[tuple[str, list[str], int]] = []

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> list[RerankResult]:
        self.calls.append((query, list(documents), top_n))
        if self.error:
            raise self.error
        return [RerankResult(i, s) for i, s in self.picks]


class RecordingStore(SqliteIndexStore):
    """The real store, noting the limits each lane is asked for."""

    def keyword_lane(self, query, limit, *, within=None):  # type: ignore[no-untyped-def]
        self.asked = [*getattr(self, "asked", []), ("keyword", limit)]
        return super().keyword_lane(query, limit, within=within)

    def vector_lane(self, vector, limit, *, within=None):  # type: ignore[no-untyped-def]
        self.asked = [*getattr(self, "asked", []), ("vector", limit)]
        return super().vector_lane(vector, limit, within=within)

    def hits_for(self, pairs):  # type: ignore[no-untyped-def]
        self.read = [*getattr(self, "read", []), len(pairs)]
        return super().hits_for(pairs)


DOCS = {
    "m1": "cat cat cat",
    "m2": "cat dog",
    "m3": "dog dog fish",
    "m4": "fish bird",
    "m5": "bird bird cat",
    "m6": "nothing relevant here",
}


@pytest.fixture
def store(tmp_path: Path):
    s = RecordingStore.open(tmp_path / "index.sqlite", base_id="b", dims=len(VOCAB))
    emb = WordEmbedder()
    for mid, text in DOCS.items():
        vec = emb.embed([text])[0]
        s.rebuild_material(
            MaterialInput(mid, f"docs/{mid}.md", text, [Chunk(text, 0, len(text), 0, {"page": 1})]),
            {text_hash(text): vec},
        )
    yield s
    s.close()


def everything(ids: set[str]) -> dict[str, VisibleItem]:
    return {i: VisibleItem(i, "file", f"Title {i}", f"{i}.md") for i in ids}


def only(*allowed: str):
    def visible(ids: set[str]) -> dict[str, VisibleItem]:
        return {i: v for i, v in everything(ids).items() if i in allowed}

    return visible


HYBRID = SearchConfig(dims=len(VOCAB))


def test_query_bounds_and_tokens(store: SqliteIndexStore) -> None:
    emb = WordEmbedder()
    for bad in ["", "   ", "x" * 1001]:
        with pytest.raises(InvalidInput):
            search(store, bad, config=HYBRID, embedder=emb, reranker=None, visible=everything)
    with pytest.raises(NoSearchableTokens):
        search(store, " ?!… ", config=HYBRID, embedder=emb, reranker=None, visible=everything)
    assert emb.calls == []  # refused before any embedding
    r = search(store, "  cat " + " " * 2000, config=HYBRID, embedder=None, reranker=None,
               visible=everything)  # fmt: skip
    assert r.explain["query"] == "cat"


def test_bm25_mode_without_embedder_or_dims(store: SqliteIndexStore) -> None:
    r = search(
        store, "cat", config=SearchConfig(), embedder=None, reranker=None, visible=everything
    )
    assert r.mode == "bm25"
    assert [x.item_id for x in r.results][0] == "m1"
    assert all(x.score_kind == "keyword" for x in r.results)
    emb = WordEmbedder()
    r = search(store, "cat", config=SearchConfig(), embedder=emb, reranker=None, visible=everything)
    assert r.mode == "bm25" and emb.calls == []
    assert r.explain["dense_lane"]["reason"] == "base_has_no_dims"


def test_hybrid_rrf_scores_and_result_fields(store: SqliteIndexStore) -> None:
    rrf = SearchConfig(dims=len(VOCAB), fusion=FusionSettings(method="rrf"))
    r = search(store, "cat", config=rrf, embedder=WordEmbedder(), reranker=None,
               visible=everything)  # fmt: skip
    assert r.mode == "hybrid"
    top = r.results[0]
    # m1 is rank 1 in both lanes (pure "cat" vector; most "cat" terms, shortest).
    assert top.item_id == "m1" and top.score == pytest.approx(0.5 / 61 + 0.5 / 61)
    assert top.rank == 1 and top.concept_id == "docs/m1.md" and top.title == "Title m1"
    assert (top.text, top.char_start, top.char_end, top.unit_index) == ("cat cat cat", 0, 11, 0)
    assert top.locator == {"page": 1} and top.source == "m1.md" and top.item_type == "file"
    assert [x.rank for x in r.results] == list(range(1, len(r.results) + 1))
    scores = [x.score for x in r.results]
    assert scores == sorted(scores, reverse=True)
    assert "m6" not in {x.item_id for x in r.results}  # zero vector and no keyword


@pytest.fixture
def many_cats(tmp_path: Path):
    """250 one-chunk documents that all match "cat", in a known keyword order."""
    s = SqliteIndexStore.open(tmp_path / "many.sqlite", base_id="b", dims=None)
    for n in range(250):
        text = f"cat {'filler ' * (n % 7)}doc{n:03d}"
        s.rebuild_material(
            MaterialInput(f"d{n:03d}", f"d{n:03d}.md", text, [Chunk(text, 0, len(text), 0, {})]),
            {},
        )
    yield s
    s.close()


def test_lane_limits(many_cats: SqliteIndexStore) -> None:
    """Search looks at 5 × top_k candidates (at most 200): what that means for results."""
    order = [h.material_id for h in many_cats.keyword_search("cat", 1000)]
    assert len(order) == 250

    def bm25(top_k: int, visible, reranker=None):  # type: ignore[no-untyped-def]
        return search(many_cats, "cat", config=SearchConfig(top_k=top_k), embedder=None,
                      reranker=reranker, visible=visible)  # fmt: skip

    # Hidden items ahead of a visible one: found while it is within the 5 × top_k window,
    # not beyond it (a search never walks the whole lane).
    for top_k in (1, 2, 4):
        edge, past = order[5 * top_k - 1], order[5 * top_k]
        assert [x.item_id for x in bm25(top_k, only(edge)).results] == [edge]
        assert bm25(top_k, only(past)).results == []
    # A reranker sees every candidate: 5 × top_k of them, capped at 200 for a large top_k.
    for top_k, seen in ((3, 15), (100, 200)):
        reranker = ListReranker([(0, 0.9)])
        r = bm25(top_k, everything, reranker)
        [(_, documents, _)] = reranker.calls
        assert len(documents) == seen
        assert r.results[0].item_id == order[0]


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_bm25_widens_only_when_hidden_items_leave_a_gap(store: RecordingStore, top_k: int) -> None:
    """Every subset of visible items: the shown hits are those of the full candidate list."""
    mids = sorted(DOCS)
    full = store.keyword_search("cat dog bird", top_k * 5)
    for mask in range(2 ** len(mids)):
        allowed = {m for n, m in enumerate(mids) if mask >> n & 1}
        store.asked = []
        r = search(store, "cat dog bird", config=SearchConfig(top_k=top_k), embedder=None,
                   reranker=None, visible=only(*allowed))  # fmt: skip
        expected = [h.unit_id for h in full if h.material_id in allowed][:top_k]
        assert [x.chunk_id for x in r.results] == expected
        first = [h.material_id for h in full[:top_k]]
        widened = len(full) >= top_k and not set(first) <= allowed
        assert store.asked == [("keyword", top_k)] + ([("keyword", top_k * 5)] * widened)


def test_visibility_drops_hidden_items(store: SqliteIndexStore) -> None:
    r = search(store, "cat", config=HYBRID, embedder=WordEmbedder(), reranker=None,
               visible=only("m2", "m5"))  # fmt: skip
    assert {x.item_id for x in r.results} == {"m2", "m5"}
    assert [x.rank for x in r.results] == [1, 2]
    assert r.explain["hidden"] >= 1


def test_rerank_runs_before_trim(store: SqliteIndexStore) -> None:
    every = replace(HYBRID, threshold=0.0)  # every candidate, as the reranker sees them
    base = search(store, "cat dog", config=every, embedder=WordEmbedder(), reranker=None,
                  visible=everything)  # fmt: skip
    fused_ids = [x.item_id for x in base.results]
    assert len(fused_ids) >= 4
    rr = ListReranker([(3, 0.9), (0, 0.4), (3, 0.1), (99, 1.0)])
    cfg = SearchConfig(top_k=2, dims=4)
    r = search(store, "cat dog", config=cfg, embedder=WordEmbedder(), reranker=rr,
               visible=everything)  # fmt: skip
    # The 4th fused hit would have been trimmed by top_k=2; reranking first keeps it.
    assert [x.item_id for x in r.results] == [fused_ids[3], fused_ids[0]]
    assert [x.score for x in r.results] == [0.9, 0.4]
    assert all(x.score_kind == "relevance" for x in r.results)
    assert rr.calls[0][2] == 2 and len(rr.calls[0][1]) == len(fused_ids)
    rr6 = ListReranker([(0, 0.5)])
    search(store, "cat", config=HYBRID, embedder=WordEmbedder(), reranker=rr6, visible=everything)
    assert rr6.calls[0][2] == 6  # default topN is 6, not 10


def test_rerank_error_keeps_fused_list(store: SqliteIndexStore) -> None:
    rr = ListReranker([], error=ProviderUnavailable("rerank endpoint down"))
    r = search(store, "cat", config=HYBRID, embedder=WordEmbedder(), reranker=rr,
               visible=everything)  # fmt: skip
    assert r.results and all(x.score_kind == "hybrid" for x in r.results)
    assert r.explain["rerank"]["error"]["code"] == "provider_unavailable"
    boom = ListReranker([], error=RuntimeError("boom"))
    r = search(store, "cat", config=HYBRID, embedder=WordEmbedder(), reranker=boom,
               visible=everything)  # fmt: skip
    assert r.results and r.explain["rerank"]["error"]["message"] == "boom"


def test_threshold_applies_only_to_relevance(store: SqliteIndexStore) -> None:
    cfg = SearchConfig(threshold=0.5, dims=4)
    plain = search(store, "cat", config=cfg, embedder=WordEmbedder(), reranker=None,
                   visible=everything)  # fmt: skip
    assert plain.results  # RRF scores (< 0.02) are never thresholded
    rr = ListReranker([(0, 0.9), (1, 0.6), (2, 0.2)])
    r = search(store, "cat", config=cfg, embedder=WordEmbedder(), reranker=rr,
               visible=everything)  # fmt: skip
    assert [x.score for x in r.results] == [0.9, 0.6]
    assert [x.rank for x in r.results] == [1, 2]


def test_query_embedding_width_checked(store: SqliteIndexStore) -> None:
    with pytest.raises(EmbeddingMismatch):
        search(store, "cat", config=HYBRID, embedder=WordEmbedder(width=3), reranker=None,
               visible=everything)  # fmt: skip


def test_uncovered_script_runs_keyword_only(tmp_path: Path) -> None:
    s = SqliteIndexStore.open(tmp_path / "cjk.sqlite", base_id="c", dims=len(VOCAB))
    try:
        text = "机器学习 cat"
        s.rebuild_material(
            MaterialInput("z", "z.md", text, [Chunk(text, 0, len(text), 0)]),
            {text_hash(text): WordEmbedder().embed([text])[0]},
        )
        emb = WordEmbedder()
        r = search(s, "机器学习", config=HYBRID, embedder=emb, reranker=None, visible=everything)
        assert r.mode == "bm25" and emb.calls == []
        assert r.explain["dense_lane"]["reason"] == "query_script_not_covered"
        assert [x.item_id for x in r.results] == ["z"]
        r = search(s, "cat 学习", config=HYBRID, embedder=emb, reranker=None, visible=everything)
        assert r.mode == "bm25"  # 3 Latin letters of 5: under the 90% the dense vote needs
        r = search(s, "cat dog fish bird 学", config=HYBRID, embedder=emb, reranker=None,
                   visible=everything)  # fmt: skip
        assert r.mode == "hybrid"  # 15 Latin letters of 16: over 90%
    finally:
        s.close()


def test_script_coverage_rule() -> None:
    latin = frozenset({"Latin"})
    assert script_coverage("机器学习", latin)["covered"] is False
    assert script_coverage("ab 学习", latin)["covered"] is False  # half: under 90%
    assert script_coverage("abcdefghi 学", latin)["covered"] is True  # 9 of 10: exactly 90%
    assert script_coverage("abcdefgh 学", latin)["covered"] is False  # 8 of 9
    assert script_coverage("Visual Studio Code的默认快捷键是什么", latin)["covered"] is False
    assert script_coverage("2024", latin)["covered"] is True
    assert script_coverage("Привет", latin)["covered"] is False
    assert script_coverage("Привет", frozenset({"Latin", "Cyrillic"}))["covered"] is True
    assert script_coverage("机器学习", None)["covered"] is True


class QueryPrefixEmbedder(WordEmbedder):
    """Like E5: queries go through ``embed_queries``, which here reads every query as "bird"."""

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.query_calls = [*getattr(self, "query_calls", []), list(texts)]
        return self.embed(["bird"] * len(texts))


def test_query_vector_comes_from_embed_queries_when_the_provider_has_it(
    store: SqliteIndexStore,
) -> None:
    emb = QueryPrefixEmbedder()
    r = search(store, "zebra", config=HYBRID, embedder=emb, reranker=None, visible=everything)
    assert emb.query_calls == [["zebra"]]
    assert r.explain["lanes"]["keyword"] == 0  # "zebra" is in no document: only vectors vote
    assert r.results[0].item_id == "m5"  # nearest the pure-"bird" vector: "bird bird cat"
