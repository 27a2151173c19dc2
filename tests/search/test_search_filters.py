"""Search filters inside both lanes, before the top-k cut (issue 15 item 5).

Store level: 250 documents that all match, the scope's three at the bottom of both lanes — a
post-filter of the lanes' top candidates would return none of them. Facade level (``kb``: run
once per backend with ``KB_TEST_BACKENDS``): folders, types, dates, CJK text, combined filters,
on a BM25-only and a hybrid (``hash:``) base.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from knowbase.catalog.models import Base
from knowbase.errors import InvalidFilter
from knowbase.index.base import MaterialInput
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.operations.add.inputs import AddInput
from knowbase.search.scope import Scope, SearchFilters
from knowbase.search.search import SearchConfig, VisibleItem, search
from knowbase.service import Knowledge
from knowbase.units.chunk import Chunk
from knowbase.units.hashing import text_hash


class AxisEmbedder:
    """ "cat" points along x, "fish" along y: bulk documents sit near a "cat" query."""

    model_id = "test:axis"
    dims = 2
    window = None
    scripts = None
    batch_size = 8

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        return np.array(
            [[t.split().count("cat") + 0.01, t.split().count("fish") + 0.01] for t in texts],
            dtype=np.float32,
        )

    def count_tokens(self, text: str) -> int | None:
        return None


def everything(ids: set[str]) -> dict[str, VisibleItem]:
    return {i: VisibleItem(i, "file", i, i) for i in ids}


@pytest.fixture
def crowded(tmp_path: Path):
    """247 ``bulk/`` documents that match "cat" best in both lanes, 3 ``rare/`` ones last."""
    s = SqliteIndexStore.open(tmp_path / "i.sqlite", base_id="b", dims=2)
    emb = AxisEmbedder()
    texts = {f"b{n:03d}": f"cat cat cat doc{n:03d}" for n in range(247)}
    texts |= {f"r{n}": f"cat {'fish ' * 9}rare{n}" for n in range(3)}
    for mid, text in texts.items():
        folder = "rare" if mid.startswith("r") else "bulk"
        s.rebuild_material(
            MaterialInput(mid, f"{folder}/{mid}.md", text, [Chunk(text, 0, len(text), 0, {})]),
            {text_hash(text): emb.embed([text])[0]},
        )
    yield s
    s.close()


RARE = frozenset({"r0", "r1", "r2"})


@pytest.mark.parametrize("hybrid", [False, True])
def test_a_scope_below_every_lane_cut_still_fills_the_results(
    crowded: SqliteIndexStore, hybrid: bool
) -> None:
    emb = AxisEmbedder() if hybrid else None
    config = SearchConfig(top_k=5, dims=2 if hybrid else None)
    plain = search(crowded, "cat", config=config, embedder=emb, reranker=None, visible=everything)
    assert len(plain.results) == 5 and all(r.concept_id.startswith("bulk/") for r in plain.results)
    # the rare documents are below both lanes' cuts of an unfiltered search
    lane = plain.explain["lanes"]["lane_limit"]
    assert {h.material_id for h in crowded.keyword_lane("cat", lane)}.isdisjoint(RARE)
    if hybrid:
        vec = emb.embed(["cat"])[0]
        assert {h.material_id for h in crowded.vector_lane(vec, lane)}.isdisjoint(RARE)

    scope = Scope(SearchFilters(under="rare"), RARE)
    r = search(crowded, "cat", config=config, embedder=emb, reranker=None, visible=everything,
               scope=scope)  # fmt: skip
    assert sorted(x.item_id for x in r.results) == ["r0", "r1", "r2"]  # fewer than top_k: all
    assert all(x.concept_id.startswith("rare/") and x.text for x in r.results)
    assert r.explain["filters"] == {"under": "rare", "allowed_materials": 3}
    if hybrid:
        assert r.mode == "hybrid" and r.explain["lanes"]["vector"] == 3
    assert r.explain["lanes"]["keyword"] == 3


def test_a_scope_that_allows_nothing_is_an_empty_answer_without_embedding(
    crowded: SqliteIndexStore,
) -> None:
    emb = AxisEmbedder()
    nothing = Scope(SearchFilters(under="none"), frozenset())
    r = search(crowded, "cat", config=SearchConfig(dims=2), embedder=emb, reranker=None,
               visible=everything, scope=nothing)  # fmt: skip
    assert r.results == [] and emb.calls == 0
    assert r.explain["filters"]["allowed_materials"] == 0


def test_lanes_read_text_only_for_the_hits_shown(crowded: SqliteIndexStore) -> None:
    """The lanes return ids and scores; text and locators are read for the top_k shown."""
    read: list[int] = []

    class Counting(SqliteIndexStore):
        def hits_for(self, pairs):  # type: ignore[no-untyped-def]
            read.append(len(pairs))
            return super().hits_for(pairs)

    store = Counting.open(crowded.path, base_id="b", dims=2)
    try:
        r = search(store, "cat", config=SearchConfig(top_k=4, dims=2), embedder=AxisEmbedder(),
                   reranker=None, visible=everything)  # fmt: skip
    finally:
        store.close()
    assert len(r.results) == 4 and r.explain["lanes"]["keyword"] == 100
    assert read == [4]


# --- the facade, per backend --------------------------------------------------------------------
@pytest.fixture
def library(tmp_path: Path) -> Path:
    """Folders ``papers/`` (md, txt, a nested md), ``papers2/`` (md) and ``资料/论文`` (CJK)."""
    root = tmp_path / "lib"
    files = {
        "papers/alpaca.md": "# Alpacas\n\nAlpaca wool is soft and warm.",
        "papers/deep/llama.md": "# Llamas\n\nLlama wool is coarse; alpaca wool is finer.",
        "papers/guide.txt": "A guide to alpaca wool for spinners.",
        "papers2/other.md": "# Other\n\nAlpaca wool from another folder.",
        "资料/论文/羊驼.md": "# 羊驼\n\n羊驼的毛很柔软，羊驼毛比羊毛更暖和。",
        "资料/其他.md": "# 其他\n\n羊驼毛的价格很高。",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _fill(kb: Knowledge, base: Base, library: Path) -> datetime:
    """Add the folders, then (after a moment recorded as the cut) a note; returns the cut."""
    kb.add(base.id, [AddInput.directory(library / d) for d in ("papers", "papers2", "资料")],
           wait=True)  # fmt: skip
    time.sleep(0.02)
    cut = datetime.now(UTC)
    time.sleep(0.02)
    kb.add(base.id, [AddInput.note("Alpaca wool notes from the farm visit.")], wait=True)
    return cut


@pytest.fixture(params=["bm25_base", "hash_base"])
def filled(request: pytest.FixtureRequest, kb: Knowledge, library: Path) -> tuple[Base, datetime]:
    base = request.getfixturevalue(request.param)
    return base, _fill(kb, base, library)


def paths(response) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted({r.concept_id for r in response.results})


def test_each_filter_and_their_combination(kb: Knowledge, filled: tuple[Base, datetime]) -> None:
    base, cut = filled
    unfiltered = set(paths(kb.search(base.id, "alpaca wool", top_k=20)))
    # (a hybrid base's hash vectors also bring the Chinese documents)
    assert {"papers/alpaca.md", "papers2/other.md", "papers/guide.txt"} <= unfiltered
    under = kb.search(base.id, "alpaca wool", top_k=20, under="papers")
    assert paths(under) == ["papers/alpaca.md", "papers/deep/llama.md", "papers/guide.txt"]
    assert under.explain["filters"] == {"under": "papers", "allowed_materials": 3}
    assert paths(kb.search(base.id, "alpaca wool", under="/papers/deep/")) == [
        "papers/deep/llama.md"
    ]
    txt = kb.search(base.id, "alpaca wool", top_k=20, types=["txt"])
    assert paths(txt) == ["papers/guide.txt"]
    notes = kb.search(base.id, "alpaca wool", top_k=20, types="note")
    assert [r.item_type for r in notes.results] == ["note"]
    recent = kb.search(base.id, "alpaca wool", top_k=20, since=cut.isoformat())
    assert [r.item_type for r in recent.results] == ["note"]
    assert recent.explain["filters"]["allowed_materials"] == 1
    combined = kb.search(base.id, "alpaca wool", top_k=20, under="papers", types="md,txt",
                         since="2000-01-01")  # fmt: skip
    assert paths(combined) == ["papers/alpaca.md", "papers/deep/llama.md", "papers/guide.txt"]
    assert paths(kb.search(base.id, "alpaca wool", under="papers", types=["md"])) == [
        "papers/alpaca.md",
        "papers/deep/llama.md",
    ]
    assert kb.search(base.id, "alpaca wool", under="papers", since=cut.isoformat()).results == []
    assert kb.search(base.id, "alpaca wool", types=["pdf"]).results == []
    assert kb.search(base.id, "alpaca wool", under="pap").results == []  # segments, not text


def test_cjk_text_under_a_path_prefix(kb: Knowledge, filled: tuple[Base, datetime]) -> None:
    base, _ = filled
    plain = kb.search(base.id, "羊驼毛", top_k=20)
    assert {"资料/其他.md", "资料/论文/羊驼.md"} <= set(paths(plain))
    scoped = kb.search(base.id, "羊驼毛", top_k=20, under="资料/论文")
    assert paths(scoped) == ["资料/论文/羊驼.md"]
    assert "羊驼" in scoped.results[0].text
    assert paths(kb.search(base.id, "羊驼毛", under="资料", types="md")) == [
        "资料/其他.md",
        "资料/论文/羊驼.md",
    ]


def test_bad_filters_raise_before_searching(kb: Knowledge, bm25_base: Base) -> None:
    for bad in ({"types": ["pfd"]}, {"since": "last week"}, {"under": "../etc"}):
        with pytest.raises(InvalidFilter):
            kb.search(bm25_base.id, "alpaca", **bad)
        with pytest.raises(InvalidFilter):
            kb.search_many([bm25_base.id], "alpaca", **bad)


def test_search_many_applies_the_filters_in_every_base(
    kb: Knowledge, library: Path, bm25_base: Base, hash_base: Base
) -> None:
    _fill(kb, bm25_base, library)
    _fill(kb, hash_base, library)
    found = kb.search_many([bm25_base.id, hash_base.id], "alpaca wool", top_k=10, under="papers2")
    assert {(m.base_id, m.result.concept_id) for m in found.results} == {
        (bm25_base.id, "papers2/other.md"),
        (hash_base.id, "papers2/other.md"),
    }
