"""``merge_results`` (one list from several bases' results: by rank, or by relevance score) and
``Knowledge.search_many`` over it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowbase.catalog import bases as base_repo
from knowbase.errors import BaseFailed, NotFound
from knowbase.search.multi_base import merge_results, merge_rule
from knowbase.search.search import ScoreKind, SearchResult
from knowbase.service import Knowledge


def hit(chunk: str, score: float, kind: ScoreKind = "ranking", text: str | None = None):  # type: ignore[no-untyped-def]
    return SearchResult(
        rank=0,
        chunk_id=chunk,
        item_id="i-" + chunk,
        concept_id=None,
        title=None,
        item_type="note",
        source=None,
        score=score,
        score_kind=kind,
        text=chunk if text is None else text,
        unit_index=0,
        char_start=0,
        char_end=1,
    )


def ranked(prefix: str, scores: list[float], kind: ScoreKind = "ranking") -> list[SearchResult]:
    return [hit(f"{prefix}{n}", s, kind) for n, s in enumerate(scores)]


def order(merged) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(m.base_id, m.result.chunk_id) for m in merged]


def test_ranking_scores_of_different_kinds_interleave_by_rank() -> None:
    """A hybrid base's RRF scores (~0.016) and a BM25 base's −bm25 scores (here 5..7) share no
    scale: sorting by score gave the BM25 base every top place. Ranks alternate instead."""
    hybrid = ranked("h", [0.0164, 0.0161, 0.0159])
    bm25 = ranked("k", [7.0, 6.0, 5.0])
    merged = merge_results([("H", hybrid), ("K", bm25)], top_k=4)
    assert order(merged) == [("H", "h0"), ("K", "k0"), ("H", "h1"), ("K", "k1")]
    assert [m.rank for m in merged] == [1, 2, 3, 4]
    assert merged[1].result.score == 7.0  # each result keeps its base's own score


def test_relevance_scores_merge_by_score() -> None:
    a = ranked("a", [0.9, 0.2], "relevance")
    b = ranked("b", [0.8, 0.7], "relevance")
    assert merge_rule([("A", a), ("B", b)]) == "score"
    assert merge_rule([("A", a), ("B", b)], same_scale=False) == "rank"  # two rerank models
    assert order(merge_results([("A", a), ("B", b)], top_k=None)) == [
        ("A", "a0"),
        ("B", "b0"),
        ("B", "b1"),
        ("A", "a1"),
    ]


def test_one_ranking_list_among_relevance_lists_falls_back_to_rank() -> None:
    a = ranked("a", [0.9, 0.8], "relevance")
    b = ranked("b", [0.01], "ranking")  # e.g. that base's reranker failed
    assert merge_rule([("A", a), ("B", b)]) == "rank"
    assert order(merge_results([("A", a), ("B", b)], top_k=None)) == [
        ("A", "a0"),
        ("B", "b0"),
        ("A", "a1"),
    ]


def test_dedupe_text_keeps_the_first_copy_and_its_base() -> None:
    a = [hit("a0", 0.02, text="same passage")]
    b = [hit("b0", 0.02, text="same passage"), hit("b1", 0.01, text="other")]
    merged = merge_results([("A", a), ("B", b)], top_k=None, dedupe_text=True)
    assert order(merged) == [("A", "a0"), ("B", "b1")]
    assert len(merge_results([("A", a), ("B", b)], top_k=None)) == 3


# --- invariants --------------------------------------------------------------------------------
kinds = st.sampled_from(["ranking", "relevance"])
texts = st.sampled_from(["t1", "t2", "t3", "t4"])


@st.composite
def per_base_lists(draw):  # type: ignore[no-untyped-def]
    """1–4 bases (an id may repeat), each with up to 6 results; one score kind or mixed."""
    kind = draw(st.one_of(kinds, st.none()))
    out = []
    for b in range(draw(st.integers(1, 4))):
        base_id = draw(st.sampled_from(["A", "B", "C", "A"]))
        n = draw(st.integers(0, 6))
        results = [
            hit(
                f"{b}-{j}",
                draw(st.floats(-10, 10, allow_nan=False)),
                kind or draw(kinds),
                draw(texts),
            )
            for j in range(n)
        ]
        out.append((base_id, results))
    return out


@given(per_base_lists(), st.one_of(st.none(), st.integers(1, 30)), st.booleans())
def test_merge_invariants(per_base, top_k, dedupe) -> None:  # type: ignore[no-untyped-def]
    merged = merge_results(per_base, top_k=top_k, dedupe_text=dedupe)
    # bounded by top_k; ranks 1..n
    assert top_k is None or len(merged) <= top_k
    assert [m.rank for m in merged] == list(range(1, len(merged) + 1))
    # no duplicates: one (base, chunk) once; with dedupe, one text once
    keys = [(m.base_id, m.result.chunk_id) for m in merged]
    assert len(keys) == len(set(keys))
    if dedupe:
        assert len({m.result.text for m in merged}) == len(merged)
    # every result comes from its own base's list
    source = {(base_id, r.chunk_id) for base_id, results in per_base for r in results}
    assert set(keys) <= source
    # each base's relative order is kept
    position = {
        (base_id, r.chunk_id): (i, j)
        for i, (base_id, results) in enumerate(per_base)
        for j, r in enumerate(results)
    }
    for list_index in range(len(per_base)):
        seen = [position[k][1] for k in keys if position[k][0] == list_index]
        assert seen == sorted(seen)
    # nothing dropped that fits: without dedupe, min(top_k, all results) are returned
    if not dedupe:
        total = len(source)
        assert len(merged) == (total if top_k is None else min(total, top_k))
    # stable: the same input gives the same list, and a larger top_k extends it
    assert order(merge_results(per_base, top_k=top_k, dedupe_text=dedupe)) == order(merged)
    longer = merge_results(per_base, top_k=None, dedupe_text=dedupe)
    assert order(longer)[: len(merged)] == order(merged)


@given(st.lists(st.lists(st.floats(0, 1, allow_nan=False), max_size=6), min_size=1, max_size=4))
def test_sorted_relevance_lists_merge_into_score_order(score_lists) -> None:  # type: ignore[no-untyped-def]
    per_base = [
        (f"B{i}", ranked(f"{i}-", sorted(scores, reverse=True), "relevance"))
        for i, scores in enumerate(score_lists)
    ]
    scores = [m.result.score for m in merge_results(per_base, top_k=None)]
    assert scores == sorted(scores, reverse=True)


@given(st.lists(st.integers(0, 6), min_size=1, max_size=4), st.integers(1, 30))
def test_rank_merge_takes_each_rank_from_every_base_in_turn(sizes, top_k) -> None:  # type: ignore[no-untyped-def]
    per_base = [(f"B{i}", ranked(f"{i}-", [1.0] * n)) for i, n in enumerate(sizes)]
    merged = merge_results(per_base, top_k=top_k)
    rounds = range(max(sizes))
    expected = [(f"B{i}", f"{i}-{j}") for j in rounds for i, n in enumerate(sizes) if j < n]
    assert order(merged) == expected[:top_k]


# --- Knowledge.search_many (search_bases) ------------------------------------------------------
def test_search_many_keeps_going_past_a_failed_base(kb: Knowledge) -> None:
    good = kb.create_base("good", file_processor_id=None)
    bad = kb.create_base("bad", file_processor_id=None)
    for base in (good, bad):
        kb.add_note(base.id, "lanterns glow at dusk")
    with kb.rt.catalog.write_tx() as conn:
        base_repo.update(conn, bad.id, status="failed", error="missing_vector_store")
    found = kb.search_many(["bad", "good", good.id], "lanterns", limit=5)
    assert [m.base_id for m in found.results] == [good.id]
    assert list(found.errors) == [bad.id] and found.errors[bad.id].code == BaseFailed.code
    assert found.modes == {good.id: "bm25"}
    with pytest.raises(NotFound):
        kb.search_many(["good", "nope"], "lanterns")
