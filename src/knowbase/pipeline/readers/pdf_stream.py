"""Tables without ruling lines, found from the page's words: lines cut at wide gaps, columns
at the gutters those cuts share.

A page's words are grouped into lines; a line is cut into *phrases* where two words are more
than :data:`_PHRASE_GAP_EM` font sizes apart, or where a run of dot leaders ends
("Total . . . . 11,062.6"). A run of lines most of which have two or more phrases is a table
candidate; its columns are the x ranges that no phrase of those lines covers (gutters), and every
word goes to the column under its middle, one row per line, as the tables of statistical
yearbooks and listings are set.

Prose stays prose: justified word gaps are ~0.3 em and never line up over a run of lines; two
text columns are long phrases on both sides (:func:`looks_tabular`); a table of contents (page
numbers rising down the last column) and an index set in two columns with leaders are lists,
not tables (:func:`_is_contents`, :func:`_is_two_column_list`).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence

from knowbase.pipeline.readers.pdf_side_by_side import split_side_by_side

Word = dict
Grid = list[list[str]]
Box = tuple[float, float, float, float]

_PHRASE_GAP_EM = 0.9  # a gap wider than this (in font sizes) separates cells
_MIN_GUTTER_EM = 0.5
_MIN_WORD_GUTTER_EM = 0.25
_LEADER = re.compile(r"[.\u2026\u00b7_]+")
_PAGE_NUMBER = re.compile(r"\d{1,4}|[ivxlcdm]{1,6}", re.IGNORECASE)
_MONOSPACE = re.compile(r"mono|nimbusmon|courier|cmtt|typewriter|consol|menlo|fixed", re.IGNORECASE)
_NUMERIC = re.compile(r"[\d.,%()\-+–—$€£ ]+")
_TYPED_RULE = re.compile(r"-{3,}|={3,}|_{3,}")  # a rule typed as characters, not drawn


def text_tables(words: Sequence[Word]) -> list[tuple[tuple[float, float, float, float], Grid]]:
    """``(bbox, rows)`` of every text-aligned table among ``words`` (pdfplumber word dicts
    with ``size`` and ``fontname``), top to bottom."""
    lines = text_lines(list(words))
    found = []
    taken = 0  # lines before this index belong to a table already
    for first, last in _regions(lines):
        region = lines[first : last + 1]
        if _is_code(region):
            continue
        edges = _gutters(region)
        if edges:
            edges = word_gutters(region, edges)
        region = _trim(region, edges)
        if not edges or len(region) < 3:
            continue
        headers = _headers_above(lines[taken:first], region, edges)
        region = headers + region
        grid = _grid(region, edges, len(headers))
        if grid is None:
            continue
        taken = last + 1
        if halves := split_side_by_side(region, edges, grid):
            found.extend(halves)
            continue
        ws = [w for line in region for w in line]
        bbox = (
            min(w["x0"] for w in ws),
            min(w["top"] for w in ws),
            max(w["x1"] for w in ws),
            max(w["bottom"] for w in ws),
        )
        found.append((bbox, grid))
    return found


def _headers_above(
    before: list[list[Word]], region: list[list[Word]], edges: list[float]
) -> list[list[Word]]:
    """Up to three short lines right above the table that fit its columns (column headings,
    a unit line, the first group label): set close (2 em) in the table's own size, so a title
    or heading above stays out. A line across the gutters joins only over the value columns
    (a spanning header such as "Design effect"): a title starts in the first column."""
    out: list[list[Word]] = []
    below = region[0]
    body = statistics.median(w["size"] for line in region for w in line)
    for line in reversed(before[-3:]):
        size = statistics.median(w["size"] for w in line)
        if (
            below[0]["top"] - max(w["bottom"] for w in line) > 2.0 * size
            or size > 1.15 * body
            or (crosses(line, edges) and line[0]["x0"] < edges[0])
            or len(" ".join(w["text"] for w in line)) > 60
        ):
            break
        out.insert(0, line)
        below = line
    return out


def text_lines(words: list[Word]) -> list[list[Word]]:
    lines: list[list[Word]] = []
    for w in sorted(words, key=lambda w: (round(w["top"]), w["x0"])):
        if lines and abs(lines[-1][0]["top"] - w["top"]) <= 0.5 * max(w["size"], 1.0):
            lines[-1].append(w)
        else:
            lines.append([w])
    return [sorted(line, key=lambda w: w["x0"]) for line in lines]


def _is_leader(w: Word) -> bool:
    return bool(_LEADER.fullmatch(w["text"]))


def _solid(line: list[Word]) -> list[Word]:
    """The line without the dot leaders that fill a gutter, which they do not cross: those
    after a number ("0.99 .......... 800"), and every run typed on a typewriter (a monospace
    font), where periods fill to the next tab stop. A typeset label's leaders ("Robbery . . .
    .") belong to its column, which they widen: left out, they opened a gutter inside it."""
    out: list[Word] = []
    last = ""
    for w in line:
        if not _is_leader(w):
            last = w["text"]
        elif _NUMERIC.fullmatch(last) or _MONOSPACE.search(w.get("fontname", "")):
            continue
        out.append(w)
    return out


def phrases(line: list[Word]) -> list[list[Word]]:
    """The line cut at wide gaps and after dot leaders."""
    out: list[list[Word]] = [[line[0]]]
    for prev, w in zip(line, line[1:], strict=False):
        gap = w["x0"] - prev["x1"]
        size = max(min(prev["size"], w["size"]), 1.0)
        if gap > _PHRASE_GAP_EM * size or (_is_leader(prev) and not _is_leader(w)):
            out.append([w])
        else:
            out[-1].append(w)
    return out


def _regions(lines: list[list[Word]]) -> list[tuple[int, int]]:
    """Runs of lines where lines with several phrases dominate (single lines between them —
    section labels, wrapped labels — stay in; at most two in a row)."""
    multi = [len(phrases(line)) >= 2 for line in lines]
    regions: list[tuple[int, int]] = []
    i = 0
    while i < len(lines):
        if not multi[i]:
            i += 1
            continue
        j, last = i, i
        while j + 1 < len(lines) and _close(lines[j], lines[j + 1]):
            j += 1
            if multi[j]:
                last = j
            elif j - last > 2:
                break
        if sum(1 for k in range(i, last + 1) if multi[k]) >= 3:
            regions.append((i, last))
        i = last + 1
    return regions


def _close(a: list[Word], b: list[Word]) -> bool:
    size = max(statistics.median(w["size"] for w in a), 1.0)
    return b[0]["top"] - max(w["bottom"] for w in a) <= 3.5 * size


def word_gutters(region: list[list[Word]], edges: list[float]) -> list[float]:
    """``edges`` plus the narrow gutters between words of a long table (10+ rows).

    Listings printed from databases set columns as close as 3 pt (0.35 em), near a word space:
    the phrase cut misses them. Over many rows, though, such a gutter is a band (≥ 0.25 em,
    in half points) that no word crosses in 90% of the rows, and the words after it start
    at one x (or those before it end at one x) in 60% of them; a word space lines up so only by
    chance, and is narrower.
    """
    multi = [line for line in region if len(phrases(line)) >= 2]
    if len(multi) < 10:
        return edges
    size = statistics.median(w["size"] for line in region for w in line)
    k = 2.0  # bins per point
    lo = int(k * min(w["x0"] for line in region for w in line))
    hi = int(k * max(w["x1"] for line in region for w in line)) + 1
    cover = [0] * (hi - lo + 2)
    for line in multi:
        for w in _solid(line):
            cover[int(k * w["x0"]) - lo] += 1
            cover[int(k * w["x1"]) + 1 - lo] -= 1
    allowed = int(0.1 * len(multi))
    out: list[float] = []
    count, start = 0, None
    for x in range(hi - lo):
        count += cover[x]
        if count <= allowed:
            start = x if start is None else start
        elif start is not None:
            if start > 0 and (x - start) / k >= _MIN_WORD_GUTTER_EM * size:
                out.append((lo + (start + x) / 2) / k)
            start = None
    new = [e for e in out if all(abs(e - f) > size for f in edges) and _aligned(multi, e)]
    return sorted(edges + new)


def _aligned(lines: list[list[Word]], edge: float) -> bool:
    """Whether the words right after ``edge`` start at one x (a left-aligned column) in at least
    60% of the lines, or the words before it end at one x (right-aligned)."""
    starts = [min((w["x0"] for w in line if w["x0"] > edge), default=None) for line in lines]
    ends = [max((w["x1"] for w in line if w["x1"] < edge), default=None) for line in lines]
    for xs in (starts, ends):
        counts = Counter(round(x) for x in xs if x is not None)
        best = max((counts[v - 1] + counts[v] + counts[v + 1] for v in counts), default=0)
        if best >= 0.6 * len(lines):
            return True
    return False


def _gutters(region: list[list[Word]]) -> list[float]:
    """x of the column edges: middles of the x ranges that (almost) no phrase of a
    multi-phrase line covers. A tenth of those lines may cross a gutter: a title or a header
    spanning several columns does not join them."""
    multi = [p for line in region if len(p := phrases(_solid(line))) >= 2]
    size = statistics.median(w["size"] for line in region for w in line)
    lo = int(min(w["x0"] for line in region for w in line))
    hi = int(max(w["x1"] for line in region for w in line)) + 1
    spans = [(ph[0]["x0"], ph[-1]["x1"]) for p in multi for ph in p]
    return gutter_middles(spans, lo, hi, int(0.1 * len(multi)), _MIN_GUTTER_EM * size)


def gutter_middles(
    spans: Sequence[tuple[float, float]], lo: int, hi: int, allowed: int, min_width: float
) -> list[float]:
    """Middles of the x bands in ``[lo, hi)``, at least ``min_width`` wide and not at the left
    edge, that at most ``allowed`` of ``spans`` (x0, x1) cross."""
    cover = [0] * (hi - lo + 2)
    for x0, x1 in spans:
        cover[int(x0) - lo] += 1
        cover[int(x1) + 1 - lo] -= 1
    middles: list[float] = []
    count, start = 0, None
    for x in range(hi - lo):
        count += cover[x]
        if count <= allowed:
            start = x if start is None else start
        elif start is not None:
            if start > 0 and x - start >= min_width:
                middles.append(lo + (start + x) / 2)
            start = None
    return middles


def crosses(line: list[Word], edges: list[float]) -> bool:
    return any(w["x0"] < e < w["x1"] for w in _solid(line) for e in edges)


def _trim(region: list[list[Word]], edges: list[float]) -> list[list[Word]]:
    """The region without leading and trailing lines that have a word across a gutter
    (titles, notes)."""
    lo, hi = 0, len(region)
    while lo < hi and crosses(region[lo], edges):
        lo += 1
    while hi > lo and crosses(region[hi - 1], edges):
        hi -= 1
    return region[lo:hi]


def _grid(region: list[list[Word]], edges: list[float], headers: int = 0) -> Grid | None:
    grid: Grid = []
    for i, line in enumerate(region):
        if all(_TYPED_RULE.fullmatch(w["text"]) for w in line):
            continue  # a rule typed as dashes under the header: not a row
        cells: list[list[str]] = [[] for _ in range(len(edges) + 1)]
        if i < headers and crosses(line, edges):
            # A spanning header: each phrase in the first column it reaches 1 em into.
            for ph in phrases(line):
                x = ph[0]["x0"] + ph[0]["size"]
                cells[sum(1 for e in edges if x > e)].extend(w["text"] for w in ph)
            grid.append([" ".join(c) for c in cells])
            continue
        col = 0
        for w in line:
            # A leader stays with the word it follows: it may reach over the gutter.
            if not _is_leader(w):
                col = sum(1 for e in edges if (w["x0"] + w["x1"]) / 2 > e)
            cells[col].append(w["text"])
        grid.append([_value(c) for c in cells])
    if not looks_tabular(grid) or _is_contents(grid, region) or _is_two_column_list(region):
        return None
    return grid


def _value(words: list[str]) -> str:
    """A cell's text; a number's trailing leaders ("0.99 ..........") are filler, not text."""
    text = " ".join(words)
    bare = " ".join(w for w in words if not _LEADER.fullmatch(w))
    return bare if bare and _NUMERIC.fullmatch(bare) else text


def looks_tabular(grid: Grid) -> bool:
    """Several filled cells in most rows, and at least one column of short cells."""
    counts = [sum(1 for c in r if c) for r in grid]
    if sum(1 for n in counts if n >= 2) < max(3, 0.5 * len(grid)):
        return False
    width = len(grid[0])
    short = 0
    for j in range(width):
        cells = [r[j] for r in grid if r[j]]
        if cells and statistics.mean(len(c.split()) for c in cells) <= 4:
            short += 1
    return short >= max(1, width - 1) or (width >= 3 and short >= width / 2)


def _is_code(region: list[list[Word]]) -> bool:
    """Preformatted text (code, hex dumps, record layouts) set in a monospace font: its
    alignment is the text's own, not a table's. A typewritten table is monospace too, but
    most of its cells are numbers: code and record layouts are mostly names, and a hex dump's
    bytes are one phrase (a single space apart)."""
    ws = [w for line in region for w in line]
    mono = sum(1 for w in ws if _MONOSPACE.search(w.get("fontname", "")))
    if mono <= 0.6 * len(ws):
        return False
    cells = [
        " ".join(w["text"] for w in ph if not _is_leader(w))
        for line in region
        if len(ps := phrases(line)) >= 2
        for ph in ps
    ]
    cells = [c for c in cells if c]
    return sum(1 for c in cells if _NUMERIC.fullmatch(c)) < 0.5 * len(cells)


def _is_contents(grid: Grid, region: list[list[Word]]) -> bool:
    """A table of contents: page numbers rising down the last column."""
    last = [r[-1] for r in grid if r[-1]]
    if len(last) < 3 or not all(_PAGE_NUMBER.fullmatch(c) for c in last):
        return False
    digits = [int(c) for c in last if c.isdigit()]
    rising = all(a <= b for a, b in zip(digits, digits[1:], strict=False))
    leaders = sum(1 for line in region if any(_is_leader(w) for w in line))
    return rising and (leaders >= len(region) / 2 or len(grid[0]) <= 3)


def _is_two_column_list(region: list[list[Word]]) -> bool:
    """An index or contents set in two columns: dot leaders end phrases on both halves."""
    ends: list[float] = []
    for line in region:
        for ph in phrases(line):
            if len(ph) > 1 and _is_leader(ph[-1]):
                ends.append(ph[-1]["x1"])
    if len(ends) < 4:
        return False
    ends.sort()
    split = max(range(1, len(ends)), key=lambda k: ends[k] - ends[k - 1])
    left, right = ends[:split], ends[split:]
    size = statistics.median(w["size"] for line in region for w in line)
    return min(len(left), len(right)) >= 2 and ends[split] - ends[split - 1] > 10 * size


def _mid(w: Word) -> float:
    return (w["top"] + w["bottom"]) / 2


def numeric_share(grid: Grid) -> float:
    cells = [c for r in grid for c in r if c]
    return sum(1 for c in cells if _NUMERIC.fullmatch(c)) / max(1, len(cells))
