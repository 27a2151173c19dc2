"""Reading order of a page set in columns: each column top to bottom, full-width lines in place.

A line of words sorted by x runs across every column at its height, so a two-column page
read line by line interleaves two texts and no phrase of either can be found (issue 41).
:func:`column_gutters` finds the vertical gutters between columns; :func:`column_sections`
cuts the page into horizontal sections at every line (or table) that crosses a gutter — a
title, an abstract, a full-width figure caption or table — and reads each section's columns
one after the other, the full-width lines where they stand.

A gutter is an x band, at least ``0.8`` em wide, crossed by words in at most half as many
lines as the densest x on either side, and in at most half as many as there are lines
starting at one x just right of it (the left edge of the next
column), with at least three lines of text on each side, three words a line on average. The
aligned left edge is what tells a gutter from the ragged right margin of a single column or
from chance gaps in prose; the words per line keep two-column key/value lists together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

Line = list[dict[str, Any]]
Band = tuple[float, float]

_MIN_GUTTER_EM = 0.8
_ALIGN_PT = 2.0
_MIN_SIDE_LINES = 3
_MIN_WORDS_PER_LINE = 3.0


def column_gutters(lines: list[Line], width: float, body: float) -> list[Band]:
    """The gutters between text columns, left to right (``[]`` for a single column)."""
    if len(lines) < 2 * _MIN_SIDE_LINES:
        return []
    covered = [0] * (int(width) + 2)
    for line in lines:
        for w in line:
            for x in range(max(0, int(w["x0"])), min(len(covered), int(w["x1"]) + 1)):
                covered[x] += 1
    lo_x, hi_x = int(width * 0.1), int(width * 0.9)
    # A gutter is a valley: crossed in at most half as many lines as the densest x on either
    # side of it (a column half filled is not a valley, the gap before it is).
    left_max, right_max = covered[:], covered[:]
    for x in range(1, len(covered)):
        left_max[x] = max(left_max[x - 1], covered[x])
    for x in range(len(covered) - 2, -1, -1):
        right_max[x] = max(right_max[x + 1], covered[x])
    bands: list[Band] = []
    start: int | None = None
    for x in range(lo_x, hi_x + 1):
        low = x < hi_x and covered[x] <= 0.5 * min(left_max[x], right_max[x])
        if low and start is None:
            start = x
        elif not low and start is not None:
            core = _core(covered, start, x, slack=max(1, len(lines) // 20))
            if core[1] - core[0] >= _MIN_GUTTER_EM * body:
                bands.append(core)
            start = None
    return [b for b in bands if _is_gutter(lines, b)]


def _core(covered: list[int], start: int, end: int, slack: int) -> Band:
    """The longest stretch of ``[start, end)`` near its least-crossed x: a valley's sides are
    the ragged ends of the column lines, not the gutter."""
    floor = min(covered[start:end]) + slack
    best, run = (start, start), start
    for x in range(start, end + 1):
        if x == end or covered[x] > floor:
            if x - run > best[1] - best[0]:
                best = (run, x)
            run = x + 1
    return float(best[0]), float(best[1])


def _is_gutter(lines: list[Line], band: Band) -> bool:
    lo, hi = band
    crossing = 0
    starts: list[int] = []
    left: list[Line] = []
    right: list[Line] = []
    for line in lines:
        if any(w["x0"] < hi and w["x1"] > lo for w in line):
            crossing += 1
            continue
        before = [w for w in line if w["x1"] <= lo]
        after = [w for w in line if w["x0"] >= hi]
        if before:
            left.append(before)
        if after:
            right.append(after)
            starts.append(round(after[0]["x0"] / _ALIGN_PT))
    if len(left) < _MIN_SIDE_LINES or len(right) < _MIN_SIDE_LINES:
        return False
    edge, _ = Counter(starts).most_common(1)[0]
    aligned = sum(1 for s in starts if abs(s - edge) <= 1)
    if aligned < _MIN_SIDE_LINES or crossing > aligned / 2:
        return False
    # Only the words up to the next gutter count for the left side; a page of three columns
    # still has prose on both sides of each gutter.
    return all(
        sum(len(ln) for ln in side) / len(side) >= _MIN_WORDS_PER_LINE for side in (left, right)
    )


def column_sections(
    lines: list[Line], gutters: list[Band], breaks: Sequence[float] = ()
) -> list[tuple[float, list[Line]]]:
    """Groups of lines in reading order, each with the top it sorts by on the page.

    Lines crossing a gutter stand alone (in place); between them (and the ``breaks``: tops of
    full-width tables), each column's lines form one group, left column first, all with the
    section's top so that sorting the page's blocks by top keeps them in this order.
    """
    out: list[tuple[float, list[Line]]] = []
    columns: list[list[Line]] = [[] for _ in range(len(gutters) + 1)]
    pending = sorted(breaks)

    def flush() -> None:
        filled = [col for col in columns if col]
        if filled:
            top = min(col[0][0]["top"] for col in filled)
            out.extend((top, col) for col in filled)
        columns[:] = [[] for _ in columns]

    for line in lines:
        top = line[0]["top"]
        while pending and pending[0] <= top:
            pending.pop(0)
            flush()
        parts = _split(line, gutters)
        if parts is None:
            flush()
            out.append((top, [line]))
            continue
        for col, part in zip(columns, parts, strict=True):
            if part:
                col.append(part)
    flush()
    return out


def _split(line: Line, gutters: list[Band]) -> list[Line] | None:
    """The line's words per column, or None when a word crosses a gutter (a full-width line)."""
    parts: list[Line] = [[] for _ in range(len(gutters) + 1)]
    for w in line:
        col = 0
        for lo, hi in gutters:
            # The middle of the gutter decides: a long last word may reach into its near side.
            mid = (lo + hi) / 2
            if w["x0"] < mid < w["x1"]:
                return None
            if w["x0"] >= mid:
                col += 1
        parts[col].append(w)
    return parts
