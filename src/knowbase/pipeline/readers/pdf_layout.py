"""One PDF page → Markdown: tables as pipe tables, headings as ``#``, columns in order.

The page is a pdfplumber page or its pdfium stand-in (:mod:`.pdf_pdfium`, the default): both
give ``chars``, ``edges``, ``extract_words`` and ``find_tables``. The rules were measured with
``bench/pdf_tables.py`` on real PDFs (``docs/documents.md``: structure F1 and seconds per page
per candidate). Steps:

1. **Tables.** Ruled tables come from pdfplumber's line strategy. A page without a sound one
   is searched for tables aligned by text (:mod:`.pdf_stream`: cells cut at wide gaps, columns
   at shared gutters), with the rules that keep prose, contents pages, indexes and code out.
   Spanned cells are flattened (text in the top-left cell), multi-line cells joined with spaces.
2. **Text** outside the tables, as words with their font size, grouped into lines. A page with
   a clear vertical gutter is read column by column (full-width lines above the columns first).
3. **Headings**: a short line whose font is well above the page's body size becomes ``#``,
   ``##`` or ``###`` by how much larger it is.
4. **Words broken at line ends** are joined: a soft hyphen (U+00AD, shown by viewers as a box)
   always, a plain hyphen when a lower-case letter follows on the next line.
"""

from __future__ import annotations

import bisect
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from knowbase.pipeline.readers.bidi import logical_lines, logical_order
from knowbase.pipeline.readers.pdf_columns import column_gutters, column_sections

# A word gap of 0.15 x the font size, not pdfplumber's fixed 3 pt: tightly set PDFs without
# space glyphs (DocBook/FOP output) glued whole lines into one word at 3 pt.
_WORD_GAP = {"x_tolerance_ratio": 0.15}
_TEXT_TABLE = {
    "vertical_strategy": "text",
    "horizontal_strategy": "text",
    "text_x_tolerance_ratio": _WORD_GAP["x_tolerance_ratio"],
}
_HEADING_RATIOS = ((1.6, 1), (1.3, 2), (1.15, 3))
_SOFT_HYPHENS = "\u00ad\ufffd"
_BREAK_HYPHENS = "-\u2010\u2011"
_MIN_GUTTER_EM = 1.0  # see _edges_are_gutters
_MAX_CROSSED = 0.125
_ALNUM = re.compile(r"[^\W_]")
_MD_LINE_START = re.compile(r"^(#{1,6}\s|[|>]|[-+*]\s|\d+[.)]\s)")


def page_markdown(page: Any) -> str:
    """The page as Markdown (``""`` when it has no text layer)."""
    if not page.chars:
        return ""
    all_words = page.extract_words(
        extra_attrs=["size", "fontname"], use_text_flow=False, **_WORD_GAP
    )
    tables = _tables(page, all_words)
    boxes = [box for box, _ in tables]
    words = [w for w in all_words if not any(_inside(w, box) for box in boxes)]
    body = _body_size(page.chars)
    blocks = [(box[1], _table_markdown(rows)) for box, rows in tables]
    blocks += _text_blocks(words, body, float(page.width), boxes)
    blocks.sort(key=lambda b: b[0])
    return "\n\n".join(text for _, text in blocks if text.strip())


# --- tables ----------------------------------------------------------------------------------


Grid = list[list[str | None]]
Box = tuple[float, float, float, float]
TEXT_TABLES = "stream"
"""Tables without ruling lines: ``"stream"`` (:mod:`.pdf_stream`); ``"plumber"`` is the reader
before it (pdfplumber's text strategy with :func:`_plausible` and :func:`_edges_are_gutters`),
kept so the benchmark can measure both; ``"both"`` tries that one first."""


def _tables(page: Any, words: list[dict]) -> list[tuple[Box, Grid]]:
    """The page's tables with their cell texts: ruled ones if they are sound, else aligned."""
    from knowbase.pipeline.readers.pdf_rules import column_beside

    cells = _CellText(page.chars)
    found = [(t, g) for t in page.find_tables() if _size_ok(g := cells.extract(t))]
    ruled: list[tuple[Box, Grid]] = [(t.bbox, g) for t, g in found]
    if ruled and all(_well_ruled(g) for _, g in ruled):
        if TEXT_TABLES == "plumber":
            return ruled
        outside = [w for w in words if not any(_inside(w, box) for box, _ in ruled)]
        ruled = []
        for t, g in found:
            box, rows = t.bbox, [r.bbox for r in t.rows]
            for side in ("left", "right"):
                box, g = column_beside(box, rows, g, outside, side) or (box, g)
            ruled.append((box, g))
        rest = [w for w in words if not any(_inside(w, box) for box, _ in ruled)]
        return ruled + _unruled(page, rest, [box for box, _ in ruled])
    aligned: list[tuple[Box, Grid]] = []
    if TEXT_TABLES in ("plumber", "both"):
        aligned = [
            (t.bbox, g)
            for t in page.find_tables(_TEXT_TABLE)
            if _plausible(g := cells.extract(t)) and _edges_are_gutters(t, words)
        ]
    if TEXT_TABLES == "stream" or (TEXT_TABLES == "both" and not aligned):
        aligned = _unruled(page, words, [])
    return aligned or ruled


def _unruled(page: Any, words: list[dict], taken: list[Box]) -> list[tuple[Box, Grid]]:
    """Tables outside ``taken`` without a full grid: ruled across only (:mod:`.pdf_rules`),
    then aligned by text (:mod:`.pdf_stream`) among the words left."""
    from knowbase.pipeline.readers.pdf_rules import rule_tables
    from knowbase.pipeline.readers.pdf_stream import text_tables

    edges = [e for e in page.edges if not any(_inside(e, box) for box in taken)]
    found: list[tuple[Box, Grid]] = list(rule_tables(edges, words))
    rest = [w for w in words if not any(_inside(w, box) for box, _ in found)]
    return found + list(text_tables(rest))


class _CellText:
    """``Table.extract()`` with the same result, without testing every char against every row.

    pdfplumber scans all the page's chars once per row (measured: two thirds of the reading
    time of a table-heavy page); chars sorted by their vertical middle give each row's chars by
    bisection.
    """

    def __init__(self, chars: list[dict]) -> None:
        self._chars = sorted(chars, key=lambda c: (c["top"] + c["bottom"]) / 2)
        self._mids = [(c["top"] + c["bottom"]) / 2 for c in self._chars]

    def extract(self, table: Any) -> Grid:
        from pdfplumber.utils import extract_text

        grid: Grid = []
        for row in table.rows:
            x0, top, x1, bottom = row.bbox
            lo, hi = bisect.bisect_left(self._mids, top), bisect.bisect_left(self._mids, bottom)
            row_chars = [c for c in self._chars[lo:hi] if x0 <= (c["x0"] + c["x1"]) / 2 < x1]
            out: list[str | None] = []
            for cell in row.cells:
                if cell is None:
                    out.append(None)
                    continue
                inside = [c for c in row_chars if _in_cell(c, cell)]
                turned = _turned(inside)
                if turned is not None:
                    out.append(_turned_text(inside, up=turned))
                else:
                    out.append(extract_text(inside, **_WORD_GAP) if inside else "")
            grid.append(out)
        return grid


def _turned(chars: list[dict]) -> bool | None:
    """None for a cell of upright glyphs; else whether its turned glyphs run up the page."""
    turned = [c for c in chars if not c["upright"]]
    if not turned or len(turned) < len(chars) / 2:
        return None
    return sum(1 for c in turned if _runs_up(c)) > len(turned) / 2


def _turned_text(chars: list[dict], up: bool) -> str:
    """The text of a cell set sideways (a narrow column's heading, usually bottom to top).

    pdfplumber reads turned glyphs top to bottom and makes each word its own line, so
    "Number of voters" set upwards came out "voters of Number".
    """
    from pdfplumber.utils.text import WordExtractor

    words = WordExtractor(**_WORD_GAP, char_dir_rotated="btt" if up else "ttb").extract_words(
        [c for c in chars if not c["upright"]]
    )
    lines: list[list[dict]] = []
    for w in sorted(words, key=lambda w: w["x0"], reverse=not up):
        if lines and abs(lines[-1][0]["x0"] - w["x0"]) <= 0.5 * max(w["x1"] - w["x0"], 1.0):
            lines[-1].append(w)
        else:
            lines.append([w])
    return "\n".join(
        " ".join(w["text"] for w in sorted(line, key=lambda w: w["top"], reverse=up))
        for line in lines
    )


def _runs_up(c: dict) -> bool:
    if "upward" in c:  # the pdfium reader's glyphs
        return bool(c["upward"])
    matrix = c.get("matrix") or (1, 0, 0, 1, 0, 0)
    return matrix[1] > 0  # pdfminer's glyph matrix: the baseline runs up the page


def _in_cell(c: dict, cell: tuple[float, float, float, float]) -> bool:
    h, v = (c["x0"] + c["x1"]) / 2, (c["top"] + c["bottom"]) / 2
    return cell[0] <= h < cell[2] and cell[1] <= v < cell[3]


def _well_ruled(rows: list[list[str | None]]) -> bool:
    """Ruling lines that really separate cells: no cell holds a whole column of values,
    and the grid is not mostly spanned/empty slots (decoration boxes, partial rules)."""
    cells = [c for r in rows for c in r]
    filled = [c for c in cells if c and c.strip()]
    stacked = sum(1 for c in filled if c.count("\n") >= 3)
    return len(filled) >= 0.3 * len(cells) and stacked <= 0.2 * len(filled)


def _size_ok(rows: list[list[str | None]]) -> bool:
    filled = [r for r in rows if sum(1 for c in r if c and c.strip()) >= 1]
    return len(filled) >= 2 and max((len(r) for r in rows), default=0) >= 2


def _edges_are_gutters(table: Any, words: list[dict]) -> bool:
    """Whether the grid's column edges lie in real gutters, not in ordinary word spaces.

    Justified prose has word gaps that line up by chance over a few lines; a text-aligned
    grid then "finds" columns at gaps of ~0.3 em. Table columns are set apart by wider gaps.
    Measured (median gap at an edge, in font sizes): tables-dev's unruled tables 1.8-27,
    justified TeX prose 0.28-0.61. Dot leaders are left out, they fill a table's gutters.
    Words lying across an edge are the other sign: a table of contents with dot leaders has
    wide gaps but cuts its entries (14% of line/edge pairs crossed), where the tables kept
    here cross 0-11% (tables-dev's 12s0324, edge_tol and detect_vertical_false cross 30-42%
    and are left as text: their grids were poor, F1 0.14-0.29).
    """
    x0, top, x1, bottom = table.bbox
    edges = sorted({c[0] for c in table.cells} - {x0})
    inside = [
        w
        for w in words
        if x0 <= w["x0"] and w["x1"] <= x1 and top <= w["top"] < bottom and _ALNUM.search(w["text"])
    ]
    gaps: list[float] = []
    crossed = 0
    for line in _lines(inside):
        size = max(statistics.median(w["size"] for w in line), 1.0)
        for e in edges:
            if any(w["x0"] < e - 0.5 and w["x1"] > e + 0.5 for w in line):
                crossed += 1  # a word across the edge: no gap here
                continue
            left = max((w["x1"] for w in line if w["x1"] <= e + 0.5), default=None)
            right = min((w["x0"] for w in line if w["x0"] >= e - 0.5), default=None)
            if left is not None and right is not None:
                gaps.append((right - left) / size)
    if not gaps or crossed > _MAX_CROSSED * (crossed + len(gaps)):
        return False
    return statistics.median(gaps) >= _MIN_GUTTER_EM


def _plausible(rows: list[list[str | None]]) -> bool:
    """A text-aligned grid is a table only if most rows have several short cells."""
    if len(rows) < 3 or len(rows[0]) < 2:
        return False
    cells = [c.strip() for r in rows for c in r if c and c.strip()]
    counts = [n for r in rows if (n := sum(1 for c in r if c and c.strip()))]
    if len(counts) < 3 or sum(1 for n in counts if n >= 2) < 0.6 * len(counts):
        return False
    words_per_cell = statistics.mean(len(c.split()) for c in cells)
    numeric = sum(1 for c in cells if re.fullmatch(r"[\d.,%()\-+–—$€£ ]+", c)) / len(cells)
    return words_per_cell <= 4 and (numeric >= 0.2 or words_per_cell <= 2.5)


def _table_markdown(rows: list[list[str | None]]) -> str:
    width = max(len(r) for r in rows)
    grid = [[_cell(c) for c in r] + [""] * (width - len(r)) for r in rows]
    # Columns empty in every row are artefacts of the grid finder, not content.
    keep = [j for j in range(width) if any(r[j] for r in grid)]
    grid = [[r[j] for j in keep] for r in grid if any(r[j] for j in keep)]
    if not grid:
        return ""
    lines = ["| " + " | ".join(r) + " |" for r in grid]
    lines.insert(1, "|" + " --- |" * len(keep))
    return "\n".join(lines)


def _cell(text: str | None) -> str:
    if not text:
        return ""
    text = logical_lines(text)  # words sorted by x are in visual order
    return join_broken_words(text).replace("\n", " ").replace("|", "\\|").strip()


def _inside(word: dict, box: tuple[float, float, float, float]) -> bool:
    cx, cy = (word["x0"] + word["x1"]) / 2, (word["top"] + word["bottom"]) / 2
    return box[0] <= cx <= box[2] and box[1] <= cy <= box[3]


# --- text ------------------------------------------------------------------------------------


def _body_size(chars: list[dict]) -> float:
    sizes = Counter(round(c["size"], 1) for c in chars if c["text"].strip())
    return sizes.most_common(1)[0][0] if sizes else 10.0


def _lines(words: list[dict]) -> list[list[dict]]:
    """Words grouped into lines (close ``top``), each line ordered left to right."""
    lines: list[list[dict]] = []
    for w in sorted(words, key=lambda w: (round(w["top"]), w["x0"])):
        if lines and abs(lines[-1][0]["top"] - w["top"]) <= 0.5 * max(w["size"], 1.0):
            lines[-1].append(w)
        else:
            lines.append([w])
    return [sorted(line, key=lambda w: w["x0"]) for line in lines]


def _text_blocks(
    words: list[dict], body: float, width: float, tables: Sequence[Box] = ()
) -> list[tuple[float, str]]:
    """Paragraphs and headings in reading order: column by column where the page has columns
    (:mod:`.pdf_columns`), a table across a gutter ending a section like a full-width line."""
    lines = _lines(words)
    gutters = column_gutters(lines, width, body)
    if not gutters:
        return _paragraphs(lines, body)
    breaks = [t[1] for t in tables if any(t[0] < (lo + hi) / 2 < t[2] for lo, hi in gutters)]
    out: list[tuple[float, str]] = []
    for top, group in column_sections(lines, gutters, breaks):
        out += [(top, text) for _, text in _paragraphs(group, body)]
    return out


def _paragraphs(lines: list[list[dict]], body: float) -> list[tuple[float, str]]:
    out: list[tuple[float, str]] = []
    current: list[str] = []
    top = prev_bottom = 0.0
    for line in lines:
        # Words sorted by x are in visual order: Arabic and Hebrew read backwards without this.
        text = logical_order(" ".join(w["text"] for w in line))
        size = statistics.median(w["size"] for w in line)
        level = _heading_level(text, size, body)
        gap = line[0]["top"] - prev_bottom
        if level or not current or gap > 0.8 * size:
            if current:
                out.append((top, join_broken_words("\n".join(current))))
            current, top = [], line[0]["top"]
        if level:
            out.append((line[0]["top"], "#" * level + " " + text))
        else:
            current.append(_escape(text))
        prev_bottom = max(w["bottom"] for w in line)
    if current:
        out.append((top, join_broken_words("\n".join(current))))
    return out


def _heading_level(text: str, size: float, body: float) -> int:
    if len(text) > 120 or not re.search(r"[^\W\d_]", text):
        return 0
    for ratio, level in _HEADING_RATIOS:
        if size >= body * ratio:
            return level
    return 0


def _escape(line: str) -> str:
    # Page text that looks like Markdown syntax would become a heading, list or table.
    return "\\" + line if _MD_LINE_START.match(line) else line


def join_broken_words(text: str) -> str:
    """Join words split at line ends: ``"sepa\\u00ad\\nrated"`` → ``"separated"``.

    A soft hyphen (or the replacement box a font without one yields) is always a break; a
    plain hyphen only before a lower-case letter, so ``"2019-\\n2020"`` stays as it is.

    >>> join_broken_words("en\\u00ad vironment and sepa-\\nrated, Covid-\\n19")
    'environment and separated, Covid-\\n19'
    """
    text = re.sub(rf"(\w)[{_SOFT_HYPHENS}][ \t]*\n?[ \t]*(\w)", r"\1\2", text)
    text = re.sub(
        rf"([^\W\d_])[{_BREAK_HYPHENS}]\n(\w)",
        lambda m: m[1] + m[2] if m[2].islower() else m[0],
        text,
    )
    return text.replace("\u00ad", "")
