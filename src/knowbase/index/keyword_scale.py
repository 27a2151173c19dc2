"""The keyword lane's absolute scale: BM25 as a share of what the query could score at most.

Raw BM25 grows with the number of query terms and their idf, so it says nothing across queries
or bases (a 4.5 on one base beside a 0.9 on another). Each backend puts it over the query's own
upper bound: a term's contribution ``idf · tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))`` never
reaches ``idf · (k1 + 1)``, so

    keyword score = Σ idf(t) · tfpart(t, unit) / ((k1 + 1) · Σ idf(t))   ∈ [0, 1)

where both sums run over every term of the query, matched anywhere or not, and ``tfpart`` is
BM25's saturating term-frequency factor. A term no unit holds has the largest idf, so a query half
made of words the base never saw scores at most about half (``zzzzqqq nonexistent gibberish``:
one word of three found ≤ 0.15); a unit holding each term once at the average length scores
``1 / (k1 + 1)`` ≈ 0.45, more for repeated terms or a shorter unit. The LIKE fallback (queries of
single CJK characters, every hit holds them all) scores a hit as such a unit of its length
(:func:`like_score`).

The lanes *rank* by FTS5's own BM25 (``ln((N − n + 0.5)/(n + 0.5))``, floor 1e-6; k1 = 1.2,
b = 0.75), which the PostgreSQL lane recomputes in SQL. The *score* weighs terms by Lucene's
idf, ``ln(1 + (N − n + 0.5)/(n + 0.5))`` (:func:`scale_idf`), which never falls to the floor:
with FTS5's, a term in more than half the units weighs 1e-6, and in a small base a query with
one unseen word would score ~0 on every hit however well the rest matched. The two idfs order
terms alike, so a lane's order and its scores rarely disagree; search orders by score.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

BM25_K1 = 1.2
BM25_B = 0.75
IDF_FLOOR = 1e-6
# Average unit length the LIKE fallback scores against (characters; CJK text, where the
# fallback runs, is about one token a character).
LIKE_AVG_CHARS = 400


def idf(n_rows: int, n_hit: int) -> float:
    """FTS5's idf of a term found in ``n_hit`` of ``n_rows`` units (floor 1e-6)."""
    value = math.log((n_rows - n_hit + 0.5) / (n_hit + 0.5)) if n_rows > 0 else 0.0
    return value if value > 0 else IDF_FLOOR


def scale_idf(n_rows: int, n_hit: int) -> float:
    """The weight a term has in the absolute score: Lucene's idf, always > 0."""
    return math.log(1.0 + (max(n_rows - n_hit, 0) + 0.5) / (n_hit + 0.5))


def absolute(parts: Iterable[tuple[float, float]]) -> float:
    """The keyword score of a unit from ``(weight, tfpart)`` per query term (``tfpart`` 0 for
    a term the unit lacks), ``tfpart`` in ``[0, k1 + 1)``."""
    pairs = list(parts)
    upper = upper_bound(w for w, _ in pairs)
    return scaled(sum(w * tf for w, tf in pairs), upper)


def upper_bound(idfs: Iterable[float]) -> float:
    """The most BM25 can give a query whose terms have these idfs: ``(k1 + 1) · Σ idf``."""
    return (BM25_K1 + 1) * sum(idfs)


def scaled(raw: float, upper: float) -> float:
    """``raw`` BM25 on the absolute scale (0 when the bound is 0), capped at 1."""
    return min(1.0, raw / upper) if upper > 0 else 0.0


def like_score(length: int, avg: float = LIKE_AVG_CHARS) -> float:
    """A LIKE hit's score: one occurrence of each term in a unit of ``length`` characters.

    >>> round(like_score(LIKE_AVG_CHARS), 4)  # = 1 / (k1 + 1)
    0.4545
    """
    return 1.0 / (1.0 + BM25_K1 * (1.0 - BM25_B + BM25_B * max(0, length) / avg))
