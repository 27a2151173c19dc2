"""The keyword lane's absolute scores: one pass per term gives FTS5's own numbers (issue 30)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowbase.index.base import MaterialInput
from knowbase.index.fts_query import fts_quote
from knowbase.index.keyword_scale import absolute, idf, scale_idf
from knowbase.index.sqlite.keyword import absolute_scores, fts_row_count
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.units.chunk import Chunk

WORDS = ["owl", "fox", "elk", "yak", "emu"]


@contextmanager
def indexed(
    path: Path, texts: list[str], concept_id: Callable[[int], str] = "d{:03d}.md".format
) -> Iterator[SqliteIndexStore]:
    """A BM25-only store holding each text as one material ``m<n>`` of one chunk."""
    store = SqliteIndexStore.open(path, base_id="b", dims=None)
    try:
        for n, text in enumerate(texts):
            chunk = Chunk(text, 0, len(text), 0)
            store.rebuild_material(MaterialInput(f"m{n:03d}", concept_id(n), text, [chunk]), {})
        yield store
    finally:
        store.close()


def scrambled(n: int) -> str:
    """Concept IDs in an order of their own, so ties do not follow insertion order."""
    return f"d{(n * 37) % 101:03d}.md"


def reference(conn, terms: list[str], rowids: list[int]) -> dict[int, float]:
    """Each term's count and BM25 asked of FTS5 row by row (how the lane used to ask)."""
    n_rows = fts_row_count(conn)
    parts: dict[int, list[tuple[float, float]]] = {r: [] for r in rowids}
    for term in terms:
        match = ("SELECT {} FROM search_text_fts WHERE search_text_fts MATCH ?", fts_quote(term))
        (n_hit,) = conn.execute(match[0].format("count(*)"), (match[1],)).fetchone()
        weight, fts_idf = scale_idf(n_rows, n_hit), idf(n_rows, n_hit)
        for rowid in rowids:
            row = conn.execute(
                match[0].format("bm25(search_text_fts)") + " AND rowid = ?", (match[1], rowid)
            ).fetchone()
            parts[rowid].append((weight, -row[0] / fts_idf if row else 0.0))
    return {rowid: absolute(pairs) for rowid, pairs in parts.items()}


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    docs=st.lists(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), min_size=1, max_size=40
    ),
    terms=st.lists(st.sampled_from([*WORDS, "gnu"]), min_size=1, max_size=4, unique=True),
    asked=st.integers(min_value=1, max_value=40),
)
def test_one_pass_scores_equal_fts5_row_by_row(
    tmp_path_factory: pytest.TempPathFactory, docs: list[list[str]], terms: list[str], asked: int
) -> None:
    texts = [" ".join(words) for words in docs]
    with indexed(tmp_path_factory.mktemp("k") / "i.sqlite", texts) as store:
        conn = store._reader()
        rowids = [r for (r,) in conn.execute("SELECT rowid FROM search_text_fts")][:asked]
        with conn:
            got = absolute_scores(conn, terms, rowids)
            want = reference(conn, terms, rowids)
        assert got == want  # the same numbers, not merely close


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    docs=st.lists(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), min_size=1, max_size=60
    ),
    terms=st.lists(st.sampled_from([*WORDS, "gnu"]), min_size=1, max_size=3, unique=True),
    limit=st.integers(min_value=1, max_value=12),
)
def test_the_unscoped_lane_joins_fewer_rows_and_returns_what_the_joined_query_does(
    tmp_path_factory: pytest.TempPathFactory, docs: list[list[str]], terms: list[str], limit: int
) -> None:
    """Short documents of five words tie a lot, at the window's cut and at the limit's: the
    unscoped lane (ranked in FTS5, joined last) must pick the same hits in the same order as
    the joined query a material scope takes."""
    texts = [" ".join(words) for words in docs]
    with indexed(tmp_path_factory.mktemp("k") / "i.sqlite", texts, scrambled) as store:
        everything = frozenset(f"m{n:03d}" for n in range(len(docs)))
        query = " ".join(terms)
        assert store.keyword_lane(query, limit) == store.keyword_lane(
            query, limit, within=everything
        )


def test_a_tie_across_the_window_cut_is_broken_by_concept_id(tmp_path: Path) -> None:
    """Twenty equal documents: the window (4 x limit + 1 rows) is cut inside one tie, so
    which rows enter it is decided by Concept ID, as the joined query decides."""
    with indexed(tmp_path / "i.sqlite", ["owl"] * 20, scrambled) as store:
        everything = frozenset(f"m{n:03d}" for n in range(20))
        for limit in (1, 2, 3):
            unscoped = store.keyword_lane("owl", limit)
            assert unscoped == store.keyword_lane("owl", limit, within=everything)
            by_path = sorted(range(20), key=scrambled)[:limit]
            assert [h.material_id for h in unscoped] == [f"m{n:03d}" for n in by_path]
