"""Keyword text, keyword queries (the truth table), and the BM25 lane on a real index."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowbase.index.base import MaterialInput
from knowbase.index.fts_query import (
    MAX_TERMS,
    build_keyword_query,
    escape_like,
    extract_tokens,
    fts_quote,
    keyword_text,
)
from knowbase.index.keyword_scale import like_score
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.units.chunk import Chunk


# --- pure functions ----------------------------------------------------------------------
def test_keyword_text_bigrams() -> None:
    assert keyword_text("机器学习") == "机器 器学 学习"
    assert keyword_text("天") == "天"
    assert keyword_text("AI机器学习 rocks").split() == ["AI", "机器", "器学", "学习", "rocks"]
    assert keyword_text("コンピューター").split() == [
        "コン",
        "ンピ",
        "ピュ",
        "ュー",
        "ータ",
        "ター",
    ]
    # Ideographic punctuation ends a run; it is no bigram part.
    assert keyword_text("天气、很好。").split() == ["天气", "、", "很好", "。"]
    assert keyword_text("plain English, unchanged.") == "plain English, unchanged."


def test_extract_tokens() -> None:
    assert extract_tokens("foo_bar, 机器学习! 42?") == ["foo_bar", "机器学习", "42"]
    assert extract_tokens("?!… --") == []


def test_escape_like_and_quote() -> None:
    assert escape_like(r"50%_a\b") == r"50\%\_a\\b"
    assert fts_quote('say "hi"') == '"say ""hi"""'


def test_match_terms_and_stopwords() -> None:
    kq = build_keyword_query("What is the Porter stemmer")
    assert kq.mode == "match"
    assert kq.terms == ("porter", "stemmer")
    assert kq.match == '"porter" OR "stemmer"'
    assert set(kq.stopwords_dropped) == {"what", "is", "the"}


def test_only_stopwords_still_search() -> None:
    kq = build_keyword_query("to be or")
    assert kq.mode == "match" and kq.terms == ("to", "be", "or")


def test_short_latin_words_are_match_terms() -> None:
    kq = build_keyword_query("Go AI")
    assert kq.mode == "match" and kq.terms == ("go", "ai") and kq.filters == ()


def test_cjk_query_bigrams_and_single_char_filter() -> None:
    kq = build_keyword_query("学习 的")
    assert kq.mode == "match" and kq.terms == ("学习",)
    assert kq.filters == ("%的%",)


def test_single_cjk_chars_only_use_like() -> None:
    kq = build_keyword_query("天 气 the")
    assert kq.mode == "like"
    assert kq.like_terms == ("%天%", "%气%")
    assert kq.match is None


def test_underscores_split_words() -> None:
    assert build_keyword_query("foo_bar").terms == ("foo", "bar")
    assert build_keyword_query("___").mode == "none"


def test_term_cap_words_first() -> None:
    words = " ".join(f"w{i}" for i in range(70))
    kq = build_keyword_query(words + " 机器学习")
    assert len(kq.terms) == MAX_TERMS and kq.truncated
    assert kq.terms[0] == "w0" and "机器" not in kq.terms
    few = build_keyword_query("alpha 机器学习")
    assert few.terms == ("alpha", "机器", "器学", "学习") and not few.truncated


@given(st.text(max_size=80))
def test_build_never_breaks_fts_syntax_in_pure_form(q: str) -> None:
    kq = build_keyword_query(q)
    assert len(kq.terms) <= MAX_TERMS
    if kq.mode == "match":
        assert kq.match == " OR ".join(fts_quote(t) for t in kq.terms)


# --- the BM25 lane on a real index ---------------------------------------------------------
DOCS = {
    "ml": "机器学习是人工智能的一个分支。",
    "kata": "コンピューターサイエンスの入門",
    "cats": "Cats are running across the garden. Cats sleep.",
    "dogs": "A dog runs. Dogs bark at cats sometimes.",
    "go": "Go is a language. Rust is another.",
    "pct": "Discount: 50% off_all items today",
    "sky": "天",
    "weather": "今天天 气很好",
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("fts") / "index.sqlite"
    s = SqliteIndexStore.open(path, base_id="b", dims=None)
    for mid, text in DOCS.items():
        s.rebuild_material(
            MaterialInput(mid, f"{mid}.md", text, [Chunk(text, 0, len(text), 0)]), {}
        )
    yield s
    s.close()


def ids(store: SqliteIndexStore, q: str, limit: int = 10) -> list[str]:
    return [h.material_id for h in store.keyword_search(q, limit)]


def test_bm25_or_ranking_and_stemming(store: SqliteIndexStore) -> None:
    hits = store.keyword_search("cats running", 10)
    assert [h.material_id for h in hits][:2] == ["cats", "dogs"]
    assert hits[0].score > hits[1].score > 0
    assert sorted(ids(store, "run")) == ["cats", "dogs"]  # porter: running, runs → run


def test_cjk_bigram_match(store: SqliteIndexStore) -> None:
    assert ids(store, "学习") == ["ml"]
    assert ids(store, "人工智能") == ["ml"]
    assert ids(store, "深度学习") == ["ml"]  # OR of bigrams: 学习 matches


def test_katakana(store: SqliteIndexStore) -> None:
    assert ids(store, "ピューター") == ["kata"]


def test_single_char_like_fallback(store: SqliteIndexStore) -> None:
    hits = store.keyword_search("天", 10)
    assert [h.material_id for h in hits] == ["sky", "weather"]  # shortest text first
    # a one-character text holding the term once: like_score(1), on the absolute scale
    assert hits[0].score == pytest.approx(like_score(1)) and 0 < hits[1].score < hits[0].score < 1
    assert ids(store, "天 气") == ["weather"]


def test_single_char_filter_dropped_when_it_empties(store: SqliteIndexStore) -> None:
    assert ids(store, "学习 是") == ["ml"]
    assert ids(store, "学习 猫") == ["ml"]  # filter '%猫%' empties the result → re-run without


def test_short_tokens_and_punctuation(store: SqliteIndexStore) -> None:
    assert ids(store, "Go") == ["go"]
    assert ids(store, "50%") == ["pct"]
    assert ids(store, "off_all") == ["pct"]
    assert ids(store, "???") == []


def test_like_escaping_in_sqlite(store: SqliteIndexStore) -> None:
    conn = store._reader()
    for needle, hay, expected in [
        ("%", "50% off", True),
        ("%", "50 off", False),
        ("_", "a_b", True),
        ("_", "ab", False),
        ("\\", "a\\b", True),
        ("\\", "ab", False),
    ]:
        pattern = f"%{escape_like(needle)}%"
        got = conn.execute("SELECT ? LIKE ? ESCAPE '\\'", (hay, pattern)).fetchall()[0][0]
        assert bool(got) is expected, (needle, hay)


def test_quotes_in_query_are_safe(store: SqliteIndexStore) -> None:
    assert ids(store, 'cats" OR "x') == ["cats", "dogs"]


def test_many_terms_capped_still_runs(store: SqliteIndexStore) -> None:
    q = " ".join(f"zz{i}" for i in range(100)) + " dogs"
    assert ids(store, q) == []  # "dogs" is term 101 → beyond the cap, words first
    assert ids(store, "dogs " + " ".join(f"zz{i}" for i in range(100))) == ["dogs"]
