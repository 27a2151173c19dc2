"""The postgres backend's keyword lane: the SQLite lane's keyword text and its BM25.

The index holds the same keyword text as the SQLite store (:func:`.fts_query.keyword_text`, CJK
runs as bigrams), cut into the words ``unicode61`` would see (:func:`keyword_words`) and stemmed
by PostgreSQL's english snowball stemmer without stop words (config ``kb_keyword``, migration
0002s). Ranking is BM25 (k1 = 1.2, b = 0.75) on :mod:`.keyword_scale`'s absolute scale, per
query term, computed in SQL from the term frequencies in the ``tsvector`` and the base's totals
in ``kb_index`` — not ``ts_rank_cd``, which has no idf. Differences left: porter (FTS5) vs
snowball english stems, and PostgreSQL keeps at most 256 positions of one lexeme per unit.

Scores are on :mod:`.keyword_scale`'s absolute scale (terms weighed by its Lucene idf over the
query's own bound, in the same statement) and units are ordered by them, as the SQLite lane
orders its FTS5 candidates; equal scores go in Concept ID, then unit order.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

import regex
from sqlalchemy.engine import Connection

from knowbase.index.fts_query import KeywordQuery, keyword_text
from knowbase.index.keyword_scale import BM25_B, BM25_K1, LIKE_AVG_CHARS
from knowbase.index.postgres.sql import HIT, JOIN

_WORD = regex.compile(r"[\p{L}\p{N}\p{M}]+")
_LATIN = regex.compile(r"\p{Latin}")


def _strip_latin_marks(word: str) -> str:
    """``remove_diacritics 2`` of unicode61, for Latin letters only (CJK marks are letters'
    parts: か + ゙ must stay が)."""
    if not _LATIN.search(word):
        return word
    decomposed = unicodedata.normalize("NFD", word)
    return unicodedata.normalize(
        "NFC", "".join(c for c in decomposed if not unicodedata.combining(c))
    )


def keyword_words(text: str) -> list[str]:
    """The words the keyword lane indexes: :func:`keyword_text`'s, as ``unicode61`` cuts them."""
    return [_strip_latin_marks(w) for w in _WORD.findall(keyword_text(text))]


def within_sql(within: frozenset[str] | None) -> tuple[str, dict[str, Any]]:
    """The material scope of a search as SQL on ``u.material_id`` (empty without one)."""
    if within is None:
        return "", {}
    return " AND u.material_id = ANY(%(within)s)", {"within": list(within)}


def keyword_rows(
    conn: Connection,
    base_id: str,
    kq: KeywordQuery,
    limit: int,
    visible: str,
    *,
    columns: str = HIT,
    within: frozenset[str] | None = None,
) -> list[Any]:
    """Rows (``columns`` + score) for a ``match`` or ``like`` plan of :mod:`.fts_query`,
    among the units of ``within``'s materials when given (before the limit)."""
    scope, scope_args = within_sql(within)
    if kq.mode == "like":
        where = " AND ".join(f"u.body LIKE %(l{i})s" for i in range(len(kq.like_terms)))
        params = {f"l{i}": t for i, t in enumerate(kq.like_terms)}
        return conn.exec_driver_sql(
            f"SELECT {columns}, 1.0 / (1.0 + %(k1)s * (1 - %(bb)s + %(bb)s"
            f" * length(u.body) / %(avg)s)) FROM kb_unit u {JOIN} {visible}"
            f" WHERE u.base_id = %(b)s AND {where}{scope}"
            " ORDER BY length(u.body), m.relative_path, u.unit_index LIMIT %(k)s",
            {
                **params,
                **scope_args,
                "b": base_id,
                "k": limit,
                "k1": BM25_K1,
                "bb": BM25_B,
                "avg": float(LIKE_AVG_CHARS),
            },
        ).all()
    terms = [" ".join(keyword_words(t)) for t in kq.terms]
    args = (columns, scope, scope_args)
    rows = bm25_rows(conn, base_id, terms, kq.filters, limit, visible, *args)
    if not rows and kq.filters:  # the single-char filters emptied it: once without them
        rows = bm25_rows(conn, base_id, terms, (), limit, visible, *args)
    return rows


def bm25_rows(
    conn: Connection,
    base_id: str,
    terms: list[str],
    filters: Sequence[str],
    limit: int,
    visible: str,
    columns: str = HIT,
    scope: str = "",
    scope_args: dict[str, Any] | None = None,
) -> list[Any]:
    """The best ``limit`` units by FTS5's BM25 over the base's totals (``kb_index``);
    ``scope`` is :func:`within_sql`'s restriction, applied before the limit."""
    totals = conn.exec_driver_sql(
        "SELECT unit_count, token_count FROM kb_index WHERE base_id = %(b)s",
        {"b": base_id},
    ).first()
    if totals is None or not totals[0]:
        return []
    n_units, tokens = int(totals[0]), int(totals[1])
    extra = "".join(f" AND u.body LIKE %(f{i})s" for i in range(len(filters))) + scope
    params: dict[str, Any] = {f"f{i}": f for i, f in enumerate(filters)}
    params.update(scope_args or {})
    params.update(
        b=base_id,
        terms=terms,
        avgdl=tokens / n_units if tokens else 1.0,
        k=limit,
        k1=BM25_K1,
        bb=BM25_B,
    )
    # q: one row per (query term, lexeme); a term repeated in the query counts once per
    # term, as FTS5 scores each phrase of an OR query. idf from the GIN index per lexeme,
    # against N read in the same statement: under READ COMMITTED the totals read above can
    # predate units committed since, and a lexeme in more units than N broke ln() (a search
    # beside concurrent adds failed). The weight is keyword_scale's (Lucene) idf, never 0.
    sql = f"""
    WITH q AS (
      SELECT t.ord, lx.lexeme FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS t(term, ord)
      CROSS JOIN LATERAL unnest(to_tsvector('kb_keyword', t.term)) AS lx
    ), big_n AS (
      SELECT unit_count::float8 AS n FROM kb_index WHERE base_id = %(b)s
    ), w AS (
      SELECT q.lexeme,
        ln(1 + (GREATEST(big_n.n - d.n, 0) + 0.5) / (d.n + 0.5)) AS weight
      FROM q CROSS JOIN big_n CROSS JOIN LATERAL (SELECT count(*) AS n FROM kb_unit x
        WHERE x.base_id = %(b)s AND x.keyword @@ quote_literal(q.lexeme)::tsquery) d
    ), tsq AS (
      SELECT string_agg(DISTINCT quote_literal(lexeme), ' | ')::tsquery AS query FROM q
    ), bound AS (
      SELECT NULLIF((%(k1)s + 1) * SUM(weight), 0) AS upper FROM w
    )
    SELECT {columns}, LEAST(1.0, SUM(w.weight * (cardinality(lx.positions) * (%(k1)s + 1))
      / (cardinality(lx.positions)
         + %(k1)s * (1 - %(bb)s + %(bb)s * u.keyword_len / %(avgdl)s)))
      / (SELECT upper FROM bound)) AS score
    FROM kb_unit u {JOIN} {visible}
    CROSS JOIN LATERAL unnest(u.keyword) AS lx
    JOIN w ON w.lexeme = lx.lexeme
    WHERE u.base_id = %(b)s AND u.keyword @@ (SELECT query FROM tsq){extra}
    GROUP BY u.base_id, u.unit_id, m.relative_path
    ORDER BY score DESC, m.relative_path, u.unit_index LIMIT %(k)s
    """
    return conn.exec_driver_sql(sql, params).all()
