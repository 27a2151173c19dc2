"""The SQLite store's keyword lane: BM25 over the contentless FTS5 table, on the absolute
scale of :mod:`.keyword_scale` (its LIKE fallback: :func:`.keyword_scale.like_score`).

The FTS5 table is keyed by ``search_text.fts_rowid`` and holds the CJK-bigram keyword text
(:mod:`.fts_query`). Always join ``st.fts_rowid = fts.rowid``: VACUUM may renumber implicit
rowids, never ``fts_rowid``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import apsw

from knowbase.index.base import LaneHit
from knowbase.index.fts_query import KeywordQuery, fts_quote
from knowbase.index.keyword_scale import idf, like_score, scale_idf, scaled, upper_bound
from knowbase.index.sqlite.common import BATCH, Within, first, marks

CANDIDATES = 4  # keyword candidates per hit asked, re-ordered by the absolute score


def lane(conn: apsw.Connection, kq: KeywordQuery, limit: int, scope: Within) -> list[LaneHit]:
    """The lane's hits for a parsed query (``kq.mode`` not ``"none"``, ``limit`` > 0) among
    ``scope``'s materials: equal scores in Concept ID, then unit order (the same after an
    export and import, where unit ids change)."""
    if kq.mode == "like":
        where = " AND ".join("st.text LIKE ? ESCAPE '\\'" for _ in kq.like_terms)
        rows = conn.execute(
            f"SELECT su.unit_id, su.material_id, length(st.text) FROM search_text st"
            " JOIN search_unit su ON su.unit_id = st.target_id"
            " JOIN material m ON m.material_id = su.material_id"
            f" WHERE st.kind = 'body' AND {where}{scope.sql}"
            " ORDER BY length(st.text), m.relative_path, su.unit_index LIMIT ?",
            (*kq.like_terms, *scope.args, limit),
        ).fetchall()
        return [LaneHit(u, m, like_score(n)) for u, m, n in rows]
    # FTS5 ranks a window of candidates with its own idf; they are then ordered by the
    # absolute score (whose idf never floors), so a lane's order is its scores' order.
    window = CANDIDATES * limit + 1
    with conn:  # one snapshot for the ranking and its scale
        if not kq.filters and not scope.sql:
            hits = _unscoped_lane(conn, kq, limit, window)
            if hits is not None:
                return hits
        rows = match_rows(conn, kq.match or "", kq.filters, window, scope)
        if not rows and kq.filters:
            rows = match_rows(conn, kq.match or "", (), window, scope)
        scores = absolute_scores(conn, kq.terms, [r[3] for r in rows]) if rows else {}
    rows.sort(key=lambda r: (-scores[r[3]], r[4], r[5]))
    return [LaneHit(u, m, scores[rowid]) for u, m, _, rowid, *_ in rows[:limit]]


def fts_row_count(conn: apsw.Connection) -> int:
    """FTS5's own N (the first varint of its averages record, ``_data`` row 1), as its bm25()
    reads it; ``count(*)`` of the table when the record is absent."""
    row = first(conn.execute("SELECT block FROM search_text_fts_data WHERE id = 1"))
    if row is not None and row[0]:
        value = 0
        for byte in bytes(row[0])[:8]:  # SQLite varint, big-endian 7 bits a byte
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                return value
    return int(first(conn.execute("SELECT count(*) FROM search_text_fts"))[0])


def absolute_scores(
    conn: apsw.Connection, terms: Sequence[str], rowids: Sequence[int]
) -> dict[int, float]:
    """The absolute keyword score of each FTS row (:mod:`.keyword_scale`): each term's
    BM25 alone (a one-phrase query, FTS5's idf over the whole index) gives its ``tfpart``
    in the row; the terms are then weighed by :func:`.keyword_scale.scale_idf`.

    One pass over each term's matches gives both its row count (the idf's) and its BM25 in
    the rows asked about. Asking FTS5 for those rows instead (``rowid IN (...)``) re-ran the
    phrase query once per rowid: 0.2-0.9 ms each, ~200 ms for a hybrid search's 1,001
    candidates of a 4-word query over 10k chunks, where the pass costs 1-3 µs a matching row
    (issue 30: ~30x less for the whole lane; the scores are the same numbers).
    """
    n_rows = fts_row_count(conn)
    # keyword_scale.absolute per row, unrolled: the bound is the same for every row, and the
    # raw sums add each term's share in term order from 0, as ``sum`` does (a term a row lacks
    # adds 0.0): the same floats, without a list and a call per row and term.
    raw = dict.fromkeys(rowids, 0.0)
    weights: list[float] = []
    for term in terms:
        found: list[tuple[int, float]] = []
        n_hit = 0
        for rowid, score in conn.execute(
            "SELECT rowid, bm25(search_text_fts) FROM search_text_fts"
            " WHERE search_text_fts MATCH ?",
            (fts_quote(term),),
        ):
            n_hit += 1
            if rowid in raw:
                found.append((rowid, score))
        weight, fts_idf = scale_idf(n_rows, n_hit), idf(n_rows, n_hit)
        weights.append(weight)
        for rowid, score in found:
            raw[rowid] += weight * (-score / fts_idf)
    upper = upper_bound(weights)
    return {rowid: scaled(value, upper) for rowid, value in raw.items()}


def _unscoped_lane(
    conn: apsw.Connection, kq: KeywordQuery, limit: int, window: int
) -> list[LaneHit] | None:
    """:func:`lane` without filters or scope, joining only the rows it returns: the window is
    ranked inside FTS5, re-scored by rowid, and only the hits (and rows tied with the last)
    are joined to their units — ~5x fewer joined rows than :func:`match_rows` reads for a
    hybrid search's window, the biggest part of the lane's cost under load. The same hits in
    the same order; None (the caller takes the joined path) when a ranked row has no unit,
    which one read snapshot never shows."""
    ranked = _fts_ranked(conn, kq.match or "", window)
    if not ranked:
        return []
    if len(ranked) > window:  # a tie spans the window's cut: Concept ID and unit order decide
        cut = ranked[window - 1][1]
        above = [r for r in ranked if r[1] < cut]
        tied = _joined(conn, [rowid for rowid, r in ranked if r == cut])
        if tied is None:
            return None
        tied.sort(key=lambda r: (r[3], r[4]))
        ranked = above + [(r[2], cut) for r in tied[: window - len(above)]]
    scores = absolute_scores(conn, kq.terms, [rowid for rowid, _ in ranked])
    last = heapq.nlargest(limit, scores.values())[-1]  # every hit scores at least this
    rows = _joined(conn, [rowid for rowid, score in scores.items() if score >= last])
    if rows is None:
        return None
    rows.sort(key=lambda r: (-scores[r[2]], r[3], r[4]))
    return [LaneHit(u, m, scores[rowid]) for u, m, rowid, *_ in rows[:limit]]


def _fts_ranked(conn: apsw.Connection, match: str, limit: int) -> list[tuple[int, float]]:
    """``(fts rowid, bm25)`` of the ``limit`` best matches, best (lowest) first, and every
    row tied with the last of them (so a tie-break by Concept ID sees them all)."""
    want = limit + limit // 4 + 1  # room for the usual ties in one pass (widened below)
    while True:
        ranked = conn.execute(
            "SELECT rowid, bm25(search_text_fts) AS r FROM search_text_fts"
            " WHERE search_text_fts MATCH ? ORDER BY r LIMIT ?",
            (match, want),
        ).fetchall()
        # Equal scores are common (short chunks, one hit each). When a tie spans the
        # cut, widen until it ends.
        if len(ranked) < want or ranked[-1][1] != ranked[limit - 1][1]:
            break
        want *= 4
    if len(ranked) > limit:
        cut = ranked[limit - 1][1]
        ranked = [r for r in ranked if r[1] <= cut]
    return ranked


def _joined(conn: apsw.Connection, rowids: Sequence[int]) -> list[Any] | None:
    """:func:`_joined_any`, or None when one of ``rowids`` has no unit."""
    rows = _joined_any(conn, rowids)
    return rows if len(rows) == len(rowids) else None


def _joined_any(conn: apsw.Connection, rowids: Sequence[int]) -> list[Any]:
    """``(unit_id, material_id, fts rowid, Concept ID, unit index)`` of the FTS rows that
    have a unit, in no order."""
    rows: list[Any] = []
    for i in range(0, len(rowids), BATCH):
        batch = rowids[i : i + BATCH]
        rows.extend(
            conn.execute(
                # no target_type test (the CHECK makes it constant): with it the
                # planner scans the (target_type, ...) index instead of fts_rowid's
                "SELECT su.unit_id, su.material_id, st.fts_rowid, m.relative_path,"
                " su.unit_index FROM search_text st"
                " JOIN search_unit su ON su.unit_id = st.target_id"
                " JOIN material m ON m.material_id = su.material_id"
                f" WHERE st.fts_rowid IN ({marks(len(batch))})",
                batch,
            ).fetchall()
        )
    return rows


def match_rows(
    conn: apsw.Connection, match: str, filters: Sequence[str], limit: int, scope: Within
) -> list[Any]:
    """``(unit_id, material_id, bm25, fts rowid, Concept ID, unit index)`` rows, best
    (lowest) first, ties by Concept ID and unit index. The caller holds a read
    transaction."""
    if filters or scope.sql:
        # LIKE filters and the material scope need the row before the limit: one joined
        # query, ranked among the rows that pass.
        extra = "".join(" AND st.text LIKE ? ESCAPE '\\'" for _ in filters)
        return conn.execute(
            "SELECT su.unit_id, su.material_id, bm25(search_text_fts) AS r,"
            " search_text_fts.rowid, m.relative_path, su.unit_index FROM search_text_fts"
            " JOIN search_text st ON st.fts_rowid = search_text_fts.rowid"
            " JOIN search_unit su ON su.unit_id = st.target_id"
            " JOIN material m ON m.material_id = su.material_id"
            f" WHERE search_text_fts MATCH ?{extra}{scope.sql}"
            " ORDER BY r, m.relative_path, su.unit_index LIMIT ?",
            (match, *filters, *scope.args, limit),
        ).fetchall()
    # Rank inside FTS5 first, then join only the winners: joining every match before the
    # sort cost ~3x the ranking itself (a 2-word query over 10k chunks: 2.3 of 3.0 ms).
    score = dict(_fts_ranked(conn, match, limit))
    rows = _joined_any(conn, list(score))
    rows.sort(key=lambda r: (score[r[2]], r[3], r[4]))
    return [(u, m, score[r], r, path, idx) for u, m, r, path, idx in rows[:limit]]
