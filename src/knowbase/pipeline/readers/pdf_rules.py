"""Tables with partial rules. Ruled across only: the rules give the table's box and its rows,
the text gives its columns. A grid missing a side rule: the words beside it are a column.

pdfplumber's lattice finder needs vertical lines too, and the text finder (:mod:`.pdf_stream`)
sees one row per line, so a cell wrapped over several lines became several rows, and its last
line fell out of the table. Here a stack of at least three horizontal rules of the same
extent, with no word reaching past their ends, is a table candidate:

- its columns are the x bands that no word crosses in 90% of the lines inside it (≥ 0.5 em);
- a line right above the top rule with words in two or more columns is its header;
- when the rules separate rows (every line after the first of a band only continues cells of
  the band's first line: it fills no column that line left empty and leaves one it filled
  empty), each band is a row and its lines are joined;
- otherwise (a rule over and under the header and at the end, as booktabs sets them) each line
  is a row, except a line that continues the row above: it fills only columns that row filled,
  not all of them, and starts lower-case or after a hyphen ("Monitoring and" / "evaluation").
  A group row ("Processes", no value) starts upper-case and stays a row. When no line
  continues another, the table is left to the text finder, which reads it the same way and
  also finds headers above the rules.

A first or last band with a line across the gutters (a title or notes ruled off with the
table) is not part of it.

A grid with a side rule missing is here too (:func:`column_beside`): a spreadsheet's label
column without a border left of the grid, a last column without its closing rule right of it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from knowbase.pipeline.readers.pdf_stream import (
    Box,
    Grid,
    Word,
    crosses,
    gutter_middles,
    looks_tabular,
    phrases,
    text_lines,
    word_gutters,
)

_MIN_RULE_PT = 30.0
_SAME_END_PT = 2.0
_MIN_GUTTER_EM = 0.5


def rule_tables(edges: Sequence[dict], words: Sequence[Word]) -> list[tuple[Box, Grid]]:
    """``(bbox, rows)`` of the tables that horizontal rules among ``edges`` (pdfplumber edge
    dicts) bound, built from ``words`` (pdfplumber word dicts with ``size``)."""
    found: list[tuple[Box, Grid]] = []
    for x0, x1, ys in _stacks(edges):
        inside = [w for w in words if ys[0] < _mid(w) < ys[-1] and w["x1"] > x0 and w["x0"] < x1]
        if not inside or any(w["x0"] < x0 - 2 or w["x1"] > x1 + 2 for w in inside):
            continue
        lines = text_lines(inside)
        size = max(sorted(w["size"] for w in inside)[len(inside) // 2], 1.0)
        above = [w for w in words if x0 - 2 <= w["x0"] and w["x1"] <= x1 + 2]
        above = [w for w in above if ys[0] - 1.2 * size < w["bottom"] <= ys[0] + 1]
        edges_x = _gutters(lines + text_lines(above), size)
        if not edges_x:
            continue
        wide = edges_x
        edges_x = word_gutters(lines, edges_x)  # a listing's 3 pt columns, as in pdf_stream
        lines = _trim(lines, ys, edges_x, wide)
        if not lines:
            continue
        header = [
            _cells(line, edges_x) for line in text_lines(above) if not _is_title(line, edges_x)
        ]
        header = [h for h in header if sum(1 for c in h if c) >= 2][-1:]
        rows = _rows(lines, ys, edges_x)
        if len(rows) == len(lines):
            continue  # a line per row: the text finder reads it as well (and finds its headers)
        grid = [["\n".join(c) for c in r] for r in header + rows]
        if len(grid) < 3 or not looks_tabular(grid):
            continue
        ws = [w for line in lines for w in line] + (above if header else [])
        found.append(((x0, min(w["top"] for w in ws), x1, max(w["bottom"] for w in ws)), grid))
    return found


def _stacks(edges: Sequence[dict]) -> list[tuple[float, float, list[float]]]:
    """Horizontal rules grouped by their ends: ``(x0, x1, [y, ...])`` with three rules or more."""
    groups: list[tuple[float, float, list[float]]] = []
    rules = [
        e for e in edges if abs(e["top"] - e["bottom"]) < 1 and e["x1"] - e["x0"] >= _MIN_RULE_PT
    ]
    for e in sorted(rules, key=lambda e: e["top"]):
        for x0, x1, ys in groups:
            if abs(e["x0"] - x0) <= _SAME_END_PT and abs(e["x1"] - x1) <= _SAME_END_PT:
                if e["top"] - ys[-1] > 1:  # a rule drawn twice is one rule
                    ys.append(e["top"])
                break
        else:
            groups.append((e["x0"], e["x1"], [e["top"]]))
    return [g for g in groups if len(g[2]) >= 3]


def _gutters(lines: list[list[Word]], size: float) -> list[float]:
    """Middles of the x bands (≥ 0.5 em) that words cross in at most a tenth of the lines."""
    ws = [w for line in lines for w in line]
    lo, hi = int(min(w["x0"] for w in ws)), int(max(w["x1"] for w in ws)) + 1
    spans = [(w["x0"], w["x1"]) for w in ws]
    return gutter_middles(spans, lo, hi, int(0.1 * len(lines)), _MIN_GUTTER_EM * size)


def _trim(
    lines: list[list[Word]], ys: list[float], edges: list[float], wide: list[float]
) -> list[list[Word]]:
    """Without the first and last bands (between two rules) that hold a line across a
    gutter: a title or notes that the rules enclose with the table. Notes set between a
    listing's narrow gutters cross none of them; their phrases (words less than 0.9 em
    apart) run over two wide ones."""

    def prose(line: list[Word]) -> bool:
        spans = (sum(1 for e in wide if ph[0]["x0"] < e < ph[-1]["x1"]) for ph in phrases(line))
        return crosses(line, edges) or max(spans) >= 2

    band = [sum(1 for y in ys if _mid(line[0]) > y) for line in lines]
    lo, hi = 0, len(lines)
    while lo < hi and prose(lines[lo]):
        lo = max(k for k in range(lo, hi) if band[k] == band[lo]) + 1
    while hi > lo and prose(lines[hi - 1]):
        hi = min(k for k in range(lo, hi) if band[k] == band[hi - 1])
    return lines[lo:hi]


def _is_title(line: list[Word], edges: list[float]) -> bool:
    """One phrase (no gap wider than 0.9 em) over two gutters or more: a title, where column
    headings are set apart. Narrow gutters (a listing's 3 pt) let a title's words fall
    between them, so it would look like a row."""
    if len(phrases(line)) > 1:
        return False
    return sum(1 for e in edges if line[0]["x0"] < e < line[-1]["x1"]) >= 2


def _cells(line: list[Word], edges: list[float]) -> list[list[str]]:
    """The line's text in each column: ``[]`` or one string (a cell is a list of lines)."""
    cells: list[list[str]] = [[] for _ in range(len(edges) + 1)]
    for w in line:
        cells[sum(1 for e in edges if (w["x0"] + w["x1"]) / 2 > e)].append(w["text"])
    return [[" ".join(c)] if c else [] for c in cells]


def _rows(lines: list[list[Word]], ys: list[float], edges: list[float]) -> list[list[list[str]]]:
    """The table's rows: a band per row when the rules separate rows, else a line per row
    with continuation lines joined."""
    bands: list[list[list[list[str]]]] = [[] for _ in ys]
    for line in lines:
        band = sum(1 for y in ys if _mid(line[0]) > y)
        bands[band].append(_cells(line, edges))
    bands = [b for b in bands if b]
    if all(_continues(b[0], cells) for b in bands for cells in b[1:]):
        return [_joined(b) for b in bands]
    rows: list[list[list[str]]] = []
    for band in bands:
        start = len(rows)
        for cells in band:
            if len(rows) > start and _continues(rows[-1], cells) and _wraps(rows[-1], cells):
                rows[-1] = _joined([rows[-1], cells])
            else:
                rows.append(cells)
    return rows


def _continues(first: list[list[str]], cells: list[list[str]]) -> bool:
    """Whether ``cells`` (a line) only continues cells of ``first``: it fills no column that
    ``first`` left empty, and leaves one that ``first`` filled empty."""
    filled = [bool(c) for c in first]
    return all(f or not c for f, c in zip(filled, cells, strict=True)) and any(
        f and not c for f, c in zip(filled, cells, strict=True)
    )


def _wraps(row: list[list[str]], cells: list[list[str]]) -> bool:
    """A continued line starts lower-case, or the cell above ends with a hyphen."""
    for above, here in zip(row, cells, strict=True):
        if here:
            return here[0][:1].islower() or bool(above and above[-1].endswith("-"))
    return False


def _joined(lines: list[list[list[str]]]) -> list[list[str]]:
    return [[w for line in lines for w in line[j]] for j in range(len(lines[0]))]


def _mid(w: Word) -> float:
    return (w["top"] + w["bottom"]) / 2


def column_beside(
    bbox: Box, rows: list[Box], grid: list[list[str | None]], words: Sequence[Word], side: str
) -> tuple[Box, list[list[str | None]]] | None:
    """A ruled table with the column that stands outside its first (``side="left"``) or last
    (``"right"``) rule: a spreadsheet export's border-less label column, or a last column whose
    rule is missing (a table without an outer frame); None when there is none.

    The words must sit right next to the grid (within 4 em), one short line per row, in at
    least half the rows that hold anything: prose beside a table has more lines than the
    rows, or longer ones.
    """
    left = side == "left"
    beside = [
        w
        for w in words
        if (w["x1"] <= bbox[0] + 1 if left else w["x0"] >= bbox[2] - 1)
        and bbox[1] <= _mid(w) <= bbox[3]
    ]
    if not beside:
        return None
    size = statistics.median(w["size"] for w in beside)
    gap = bbox[0] - max(w["x1"] for w in beside) if left else min(w["x0"] for w in beside) - bbox[2]
    if gap > 4 * size:
        return None
    labels: list[str] = []
    for i, row in enumerate(rows):
        # A row that spans the next one (a tall header cell) ends where the next one starts.
        bottom = min(row[3], rows[i + 1][1]) if i + 1 < len(rows) else row[3]
        inside = [w for w in beside if row[1] <= _mid(w) < bottom]
        if len(text_lines(inside)) > 1:
            return None
        labels.append(" ".join(w["text"] for w in sorted(inside, key=lambda w: w["x0"])))
    filled = [lab for lab in labels if lab]
    used = sum(1 for row in grid if any(c and c.strip() for c in row))
    if len(filled) < max(2, used / 2) or statistics.mean(len(lab.split()) for lab in filled) > 4:
        return None
    if left:
        box = (min(w["x0"] for w in beside), bbox[1], bbox[2], bbox[3])
        return box, [[lab, *row] for lab, row in zip(labels, grid, strict=True)]
    box = (bbox[0], bbox[1], max(w["x1"] for w in beside), bbox[3])
    return box, [[*row, lab] for lab, row in zip(labels, grid, strict=True)]
