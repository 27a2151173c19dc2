"""Two text-aligned tables set side by side, told apart from one wide table.

A page may set two blocks of the same kind next to each other (a list of numbers continued in
a second block, two small tables). Read by gutters they make one table, which is right when
their rows pair up. They are two tables when (all three):

- one gutter is at least twice as wide as every other one;
- each side of it has two columns or more;
- one block ends (or starts) before the other: a run of two or more rows at the bottom (or
  top) fills only one side, and every other row fills both. A table's group rows (a label,
  no values) sit between full rows, so they do not split it.
"""

from __future__ import annotations

Word = dict
Grid = list[list[str]]
Box = tuple[float, float, float, float]


def split_side_by_side(
    region: list[list[Word]], edges: list[float], grid: Grid
) -> list[tuple[Box, Grid]] | None:
    """``[(bbox, rows), (bbox, rows)]`` for the left and right block, or None for one table."""
    if len(edges) < 3:
        return None
    words = [w for line in region for w in line]
    widths = [_gap(words, e) for e in edges]
    j = max(range(len(edges)), key=lambda k: widths[k])
    others = [w for k, w in enumerate(widths) if k != j]
    if not (1 <= j <= len(edges) - 2) or widths[j] < 2 * max(others):
        return None
    left = [any(r[: j + 1]) for r in grid]
    right = [any(r[j + 1 :]) for r in grid]
    both = [a and b for a, b in zip(left, right, strict=True)]
    first = both.index(True) if True in both else 0
    last = len(both) - 1 - both[::-1].index(True) if True in both else -1
    if not all(both[first : last + 1]) or len(grid) - (last - first + 1) < 2:
        return None
    out: list[tuple[Box, Grid]] = []
    for side, filled, cut in ((0, left, slice(0, j + 1)), (1, right, slice(j + 1, None))):
        rows = [r[cut] for r, f in zip(grid, filled, strict=True) if f]
        ws = [w for w in words if ((w["x0"] + w["x1"]) / 2 > edges[j]) == bool(side)]
        box = (
            min(w["x0"] for w in ws),
            min(w["top"] for w in ws),
            max(w["x1"] for w in ws),
            max(w["bottom"] for w in ws),
        )
        out.append((box, rows))
    return out


def _gap(words: list[Word], edge: float) -> float:
    """The empty band around ``edge``: from the last word end left of it to the first word
    start right of it (words across it are left out)."""
    ends = [w["x1"] for w in words if w["x1"] <= edge]
    starts = [w["x0"] for w in words if w["x0"] >= edge]
    if not ends or not starts:
        return 0.0
    return min(starts) - max(ends)
