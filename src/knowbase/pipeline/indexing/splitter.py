"""Offset-preserving, structure-aware text splitter (§4.4 "Splitter").

The splitter returns ``(start, end)`` spans into the text, never rewritten copies, so every chunk
is a verbatim slice and the index can store one ``content_text`` and derive bodies by slicing.

It walks the text greedily: from the cursor it targets a cut ``max_chars`` ahead (the token budget
turned into characters once, with the text's own chars-per-token ratio), snaps the cut to the
best-scoring break point in a look-back window, emits the span trimmed of whitespace and restarts
``overlap_chars`` before the cut. Neither a cut nor a restart falls inside a Markdown table row
(:mod:`.tables`), and no cut separates a table's header row from its separator line.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from knowbase.pipeline.indexing.tables import TableMap
from knowbase.pipeline.indexing.tokens import estimate_tokens

STRATEGIES = ("structured", "delimiter")

# Structured mode: the cut goes at the match index, before the "\n", so the heading / fence /
# rule starts the next chunk. Headings are matched at their exact level (``(?!#)``).
_STRUCTURED_PATTERNS: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"\n#(?!#)"), 100),
    (re.compile(r"\n##(?!#)"), 90),
    (re.compile(r"\n###(?!#)"), 80),
    (re.compile(r"\n####(?!#)"), 70),
    (re.compile(r"\n#####(?!#)"), 60),
    (re.compile(r"\n######(?!#)"), 50),
    (re.compile(r"\n```"), 80),
    (re.compile(r"\n(?:---|\*\*\*|___)\s*\n"), 60),
    (re.compile(r"\n\n+"), 20),
    (re.compile(r"\n[-*]\s"), 5),
    (re.compile(r"\n[0-9]+\.\s"), 5),  # [0-9], not \d: Python's \d matches every script's digits
    (re.compile(r"\n"), 1),
)
_STRUCTURED_SEPARATOR_SCORE = 30
_DELIMITER_SEPARATOR_SCORE = 100
_DELIMITER_FALLBACKS: tuple[tuple[str, int], ...] = (
    ("\n\n", 20),
    ("\n", 12),
    ("。", 10),
    (". ", 8),
    (" ", 3),
)
_FENCE = re.compile(r"\n```")
_WINDOW_RATIO = 0.22  # how far back from the target cut to look for a clean break
_DECAY = 0.7  # a break at the window's far edge keeps 30 % of its score

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
_ESCAPE = re.compile(r"\\([ntr\\])")


def unescape_separator(s: str) -> str:
    r"""Turn a user-typed separator into its characters: ``\n \t \r \\``; others stay as typed.

    >>> unescape_separator("\\n\\n") == "\n\n"
    True
    """
    return _ESCAPE.sub(lambda m: _ESCAPES[m.group(1)], s)


def js_round(x: float) -> int:
    """Round half up, as the origin's ``Math.round`` does (Python's ``round`` is half-to-even)."""
    return math.floor(x + 0.5)


@dataclass(frozen=True)
class _Breaks:
    """Candidate cut positions (sorted) with their best score."""

    positions: list[int]
    scores: list[int]


def split_text_with_offsets(
    text: str,
    *,
    chunk_size: int,
    chunk_overlap: int,
    strategy: str = "structured",
    separator: str = "\\n\\n",
) -> list[tuple[int, int]]:
    r"""Split ``text`` into trimmed, non-empty ``(start, end)`` spans of ~``chunk_size`` tokens.

    ``chunk_size``/``chunk_overlap`` are in estimated tokens (:func:`estimate_tokens`).
    ``strategy`` is ``"structured"`` (snap cuts to Markdown headings, fences, rules, paragraphs;
    the separator is a paragraph-level break; no cut inside a code fence) or ``"delimiter"``
    (the separator first, then ``\n\n``, ``\n``, ``。``, ``. ``, space). ``separator`` is the
    escaped form stored on the base. Whitespace-only text gives ``[]``.

        >>> split_text_with_offsets("# A\nalpha\n# B\nbeta", chunk_size=3, chunk_overlap=0)
        [(0, 9), (10, 18)]
    """
    if not text.strip():
        return []
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown chunk strategy {strategy!r}; expected one of {STRATEGIES}")
    size = max(1, chunk_size)
    overlap = max(0, min(chunk_overlap, size - 1))
    sep = unescape_separator(separator) if separator else ""

    n = len(text)
    cpt = n / max(1, estimate_tokens(text))
    max_chars = max(1, js_round(size * cpt))
    overlap_chars = min(js_round(overlap * cpt), max_chars - 1)
    window = max(1, js_round(_WINDOW_RATIO * max_chars))

    tables = TableMap(text) if "|" in text else None
    breaks = _scan_breaks(text, strategy, sep)
    if tables:
        breaks = _without(breaks, {p - 1 for p in tables.separator_lines()})
    fences = _code_fences(text) if strategy == "structured" else []
    fence_starts = [f[0] for f in fences]

    spans: list[tuple[int, int]] = []
    cursor = 0
    while cursor < n:
        end = min(cursor + max_chars, n)
        if end < n:
            end = _best_cut(breaks, fences, fence_starts, cursor, end, window)
            if tables:
                end = tables.cut_back(end, cursor)
        span = trim_span(text, cursor, end)
        if span is not None:
            if spans and spans[-1][0] == span[0]:
                # A whitespace run longer than the overlap trimmed both to one start; the new
                # span contains the old one, so keep starts strictly increasing.
                spans[-1] = span
            else:
                spans.append(span)
        if end >= n:
            break
        nxt = end - overlap_chars
        if tables:
            nxt = tables.start_at_row(nxt, cursor, end)
        cursor = nxt if nxt > cursor else end
    return spans


def _scan_breaks(text: str, strategy: str, sep: str) -> _Breaks:
    best: dict[int, int] = {}

    def consider(pos: int, score: int) -> None:
        if score > best.get(pos, -1):
            best[pos] = score

    if strategy == "structured":
        for pattern, score in _STRUCTURED_PATTERNS:
            for m in pattern.finditer(text):
                consider(m.start(), score)
        _literal_breaks(text, sep, _STRUCTURED_SEPARATOR_SCORE, consider)
    else:
        _literal_breaks(text, sep, _DELIMITER_SEPARATOR_SCORE, consider)
        for fallback, score in _DELIMITER_FALLBACKS:
            _literal_breaks(text, fallback, score, consider)
    positions = sorted(best)
    return _Breaks(positions, [best[p] for p in positions])


def _without(breaks: _Breaks, banned: set[int]) -> _Breaks:
    pairs = zip(breaks.positions, breaks.scores, strict=True)
    kept = [(p, sc) for p, sc in pairs if p not in banned]
    return _Breaks([p for p, _ in kept], [sc for _, sc in kept])


def _literal_breaks(text: str, sep: str, score: int, consider: Callable[[int, int], None]) -> None:
    """A break *after* each non-overlapping occurrence of ``sep`` (it ends the earlier chunk)."""
    if not sep:
        return
    i = text.find(sep)
    while i != -1:
        consider(i + len(sep), score)
        i = text.find(sep, i + len(sep))


def _code_fences(text: str) -> list[tuple[int, int]]:
    """Pair fence markers (a line starting with three backticks) into ``(start, end)`` regions.

    An unclosed fence runs to the end of the text.
    """
    regions: list[tuple[int, int]] = []
    opened: int | None = None
    for m in _FENCE.finditer(text):
        if opened is None:
            opened = m.start()
        else:
            regions.append((opened, m.end()))
            opened = None
    if opened is not None:
        regions.append((opened, len(text)))
    return regions


def _inside_fence(pos: int, fences: list[tuple[int, int]], starts: list[int]) -> bool:
    """Strictly inside a region: a cut right at a fence's opening ``\\n`` is still allowed."""
    i = bisect.bisect_left(starts, pos) - 1  # the last fence starting strictly before pos
    return i >= 0 and pos < fences[i][1]


def _best_cut(
    breaks: _Breaks,
    fences: list[tuple[int, int]],
    starts: list[int],
    cursor: int,
    target: int,
    window: int,
) -> int:
    """The best break in ``[target - window, target]`` after ``cursor``, or ``target`` (hard cut).

    Each candidate scores ``score * (1 - 0.7 d²)`` with ``d = (target - pos) / window``; the first
    (leftmost) of equal scores wins, as in the origin.
    """
    lo = bisect.bisect_left(breaks.positions, max(target - window, cursor + 1))
    hi = bisect.bisect_right(breaks.positions, target)
    best_pos, best_score = target, -1.0
    for i in range(lo, hi):
        pos = breaks.positions[i]
        if fences and _inside_fence(pos, fences, starts):
            continue
        d = (target - pos) / window
        score = breaks.scores[i] * (1 - _DECAY * d * d)
        if score > best_score:
            best_pos, best_score = pos, score
    return best_pos


def trim_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """Move ``[start, end)`` inward past whitespace; ``None`` when nothing is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None
