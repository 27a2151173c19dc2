"""A PDF page read by pdfium (C++, via pypdfium2) in the shape :mod:`.pdf_layout` reads.

pdfminer's Python parse was most of the reading time (~0.15-0.5 s a page); pdfium gives the same
glyphs with their boxes, and the page's path objects for the ruling lines, in ~0.01-0.03 s. This
adapter offers the few things :func:`.pdf_layout.page_markdown` uses of a pdfplumber page —
``chars`` and ``edges`` as pdfplumber's dicts, ``extract_words`` and ``find_tables`` run by
pdfplumber's own word and table code — so both readers share every table and heading rule.

A page is turned so that most of its text reads left to right (pdfplumber needed two more
parses for that); a page whose text runs every which way goes through pdfplumber.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections import Counter
from typing import Any

LOCK = threading.RLock()
"""pdfium is not thread-safe: every call into it, in any thread of this process, holds this."""
_PATH, _FORM = 2, 5  # FPDF_PAGEOBJ_PATH, FPDF_PAGEOBJ_FORM
_LINETO, _MOVETO = 0, 2  # FPDF_SEGMENT_*; Bézier segments are curves, never ruling lines


def open_page(pdf: Any, index: int) -> PdfiumPage | None:
    """Page ``index`` (0-based) of a ``pypdfium2.PdfDocument``, turned so that most of its text
    reads left to right; None when its text runs in no main direction (pdfplumber reads it)."""
    with LOCK:
        page = pdf[index]
        try:
            adapted = PdfiumPage(page)
        finally:
            page.close()
    upright = sum(1 for c in adapted.chars if c["upright"])
    if upright < 0.6 * len(adapted.chars):
        return None
    return adapted


class PdfiumPage:
    """``chars``, ``edges``, ``width``/``height``/``bbox``, ``extract_words`` and
    ``find_tables`` of one page, in pdfplumber's coordinates (top-left origin, points).

    The page is turned by the quarter its text mostly runs in (a table printed sideways, a
    landscape page with ``/Rotate``): pdfium gives glyphs in the page's own space, and the
    text direction of the majority decides which way is up, as a reader turns the paper.
    """

    def __init__(self, page: Any) -> None:
        import pypdfium2.raw as raw

        textpage = page.get_textpage()
        try:
            glyphs = _glyphs(raw, textpage.raw)
        finally:
            textpage.close()
        turns = Counter(g[-1] for g in glyphs)
        self._quarter = turns.most_common(1)[0][0] if turns else 0
        left, bottom, right, top = page.get_mediabox()
        corners = [self._turn(x, y) for x in (left, right) for y in (bottom, top)]
        self._x0 = min(x for x, _ in corners)
        self._y1 = max(y for _, y in corners)
        self.width = max(x for x, _ in corners) - self._x0
        self.height = self._y1 - min(y for _, y in corners)
        self.bbox = (0.0, 0.0, self.width, self.height)
        self.chars = [self._char(*g) for g in glyphs]
        self.edges = self._edges(raw, page.raw)

    def _turn(self, x: float, y: float) -> tuple[float, float]:
        """A point of the page's own space in the turned page's (still y up)."""
        q = self._quarter
        return (x, y) if q == 0 else (y, -x) if q == 1 else (-x, -y) if q == 2 else (-y, x)

    def _char(
        self, text: str, box: tuple, origin: tuple, size: float, font: str, descent: float, q: int
    ) -> dict:
        xs = [self._turn(x, y)[0] for x in (box[0], box[2]) for y in (box[1], box[3])]
        x0, x1 = min(xs) - self._x0, max(xs) - self._x0
        # pdfminer's box: the advance width, and one em from the font's descent up. pdfium's
        # loose box takes each glyph's own height, so dots and letters of one line would not
        # share a top.
        bottom = self._y1 - (self._turn(*origin)[1] + descent * size)
        top = bottom - size
        return {
            "text": text,
            "x0": x0,
            "x1": x1,
            "top": top,
            "bottom": bottom,
            "doctop": top,
            "width": x1 - x0,
            "height": size,
            "size": size,
            "fontname": font,
            "upright": q == self._quarter,
            "upward": (q - self._quarter) % 4 == 1,
        }

    # --- ruling lines ----------------------------------------------------------------------

    def _edges(self, raw: Any, page: Any) -> list[dict]:
        edges: list[dict] = []
        objects = [raw.FPDFPage_GetObject(page, i) for i in range(raw.FPDFPage_CountObjects(page))]
        self._walk(raw, objects, (1.0, 0.0, 0.0, 1.0, 0.0, 0.0), edges, depth=0)
        return edges

    def _walk(self, raw: Any, objects: list, ctm: tuple, edges: list[dict], depth: int) -> None:
        m = raw.FS_MATRIX()
        for obj in objects:
            kind = raw.FPDFPageObj_GetType(obj)
            if kind not in (_PATH, _FORM) or not raw.FPDFPageObj_GetMatrix(obj, m):
                continue
            matrix = _concat((m.a, m.b, m.c, m.d, m.e, m.f), ctm)
            if kind == _FORM and depth < 8:
                inner = [
                    raw.FPDFFormObj_GetObject(obj, i)
                    for i in range(raw.FPDFFormObj_CountObjects(obj))
                ]
                self._walk(raw, inner, matrix, edges, depth + 1)
            elif kind == _PATH:
                self._path_edges(raw, obj, matrix, edges)

    def _path_edges(self, raw: Any, obj: Any, matrix: tuple, edges: list[dict]) -> None:
        fill, stroke = ctypes.c_int(), ctypes.c_int()
        if raw.FPDFPath_GetDrawMode(obj, fill, stroke) and not fill.value and not stroke.value:
            return  # a clipping path, never painted
        x, y = ctypes.c_float(), ctypes.c_float()
        start = current = None
        for i in range(raw.FPDFPath_CountSegments(obj)):
            seg = raw.FPDFPath_GetPathSegment(obj, i)
            if not raw.FPDFPathSegment_GetPoint(seg, x, y):
                continue
            point = self._page_point(_apply(matrix, x.value, y.value))
            kind = raw.FPDFPathSegment_GetType(seg)
            if kind == _MOVETO:
                start = current = point
                continue
            if kind == _LINETO and current is not None:
                _add_edge(edges, current, point)
            current = point
            if raw.FPDFPathSegment_GetClose(seg) and start is not None:
                _add_edge(edges, current, start)
                current = start

    def _page_point(self, p: tuple[float, float]) -> tuple[float, float]:
        x, y = self._turn(*p)
        return x - self._x0, self._y1 - y

    # --- pdfplumber's word and table code on these objects ---------------------------------

    def extract_words(self, **kwargs: Any) -> list[dict]:
        from pdfplumber.utils.text import WordExtractor

        return WordExtractor(**kwargs).extract_words(self.chars)

    def find_tables(self, table_settings: dict | None = None) -> list[Any]:
        from pdfplumber.table import TableFinder, TableSettings

        return TableFinder(self, TableSettings.resolve(table_settings)).tables  # type: ignore[arg-type]


def _glyphs(raw: Any, tp: Any) -> list[tuple]:
    """``(text, loose box, origin, size, font name, descent per size, quarter)`` per glyph, in
    the page's own space; quarter is the text direction in quarter turns counter-clockwise."""
    rect, m = raw.FS_RECTF(), raw.FS_MATRIX()
    ox, oy = ctypes.c_double(), ctypes.c_double()
    fonts: dict[int, tuple[str, float]] = {}
    runs: dict[int, tuple[float, str, float, int]] = {}  # per text object: one font and matrix
    out: list[tuple] = []
    for i in range(raw.FPDFText_CountChars(tp)):
        code = raw.FPDFText_GetUnicode(tp, i)
        if code in (10, 13) or raw.FPDFText_IsGenerated(tp, i):
            continue  # pdfium's own line breaks and guessed spaces; pdfminer has none
        if not raw.FPDFText_GetLooseCharBox(tp, i, rect):
            continue
        if code == 32 and rect.right - rect.left < 0.01:
            # A space of no width, set over a digit ("5" " " ".8" at one x): sorted by x it
            # fell inside the number. Word gaps are measured, so it separates nothing.
            continue
        obj = raw.FPDFText_GetTextObject(tp, i)
        key = ctypes.cast(obj, ctypes.c_void_p).value or 0
        run = runs.get(key)
        if run is None:
            if raw.FPDFText_GetMatrix(tp, i, m):
                # The em on the page: the text state's size times the matrix's scale across
                # the line; pdfminer calls that the size.
                scale, direction = math.hypot(m.c, m.d), math.atan2(m.b, m.a)
            else:
                scale, direction = 1.0, 0.0
            quarter = round(direction / (math.pi / 2)) % 4
            name, descent = _font(raw, obj, fonts)
            run = runs[key] = (raw.FPDFText_GetFontSize(tp, i) * scale, name, descent, quarter)
        size, name, descent, quarter = run
        if size < 0.5:
            # No usable size (a zero text matrix, a Type 3 font): the glyph box's height, so
            # the word gap (a share of the size) does not cut every glyph apart.
            size = max(abs(rect.top - rect.bottom), abs(rect.right - rect.left), 1.0)
        if raw.FPDFText_GetCharOrigin(tp, i, ox, oy):
            origin = (ox.value, oy.value)
        else:
            origin = (rect.left, rect.bottom)
        box = (rect.left, rect.bottom, rect.right, rect.top)
        out.append((_text(code), box, origin, size, name, descent, quarter))
    return out


def _text(code: int) -> str:
    if code == 2:
        # pdfium's mark for a hyphen that ends a line (a soft hyphen, or "-" before a
        # letter): the line-end joining of pdf_layout decides what it was.
        return "-"
    try:
        return chr(code)
    except (ValueError, OverflowError):
        return "\ufffd"


def _font(raw: Any, obj: Any, cache: dict[int, tuple[str, float]]) -> tuple[str, float]:
    """The base font name of a text object and its descent per point of size (negative)."""
    font = raw.FPDFTextObj_GetFont(obj) if obj else None
    key = (ctypes.cast(font, ctypes.c_void_p).value or 0) if font else 0
    if key not in cache:
        name, descent = "", -0.2
        if font:
            buf = ctypes.create_string_buffer(256)
            n = raw.FPDFFont_GetBaseFontName(font, buf, 256)
            name = buf.raw[: max(0, n - 1)].decode("utf-8", "replace")
            value = ctypes.c_float()
            if raw.FPDFFont_GetDescent(font, ctypes.c_float(100.0), value):
                descent = max(-0.5, min(0.0, value.value / 100.0))
        cache[key] = (name, descent)
    return cache[key]


def _concat(m: tuple, ctm: tuple) -> tuple:
    """``m`` then ``ctm`` (PDF matrices as a, b, c, d, e, f)."""
    a, b, c, d, e, f = m
    A, B, C, D, E, F = ctm
    return (
        a * A + b * C,
        a * B + b * D,
        c * A + d * C,
        c * B + d * D,
        e * A + f * C + E,
        e * B + f * D + F,
    )


def _apply(m: tuple, x: float, y: float) -> tuple[float, float]:
    return m[0] * x + m[2] * y + m[4], m[1] * x + m[3] * y + m[5]


def _add_edge(edges: list[dict], p: tuple[float, float], q: tuple[float, float]) -> None:
    x0, x1 = sorted((p[0], q[0]))
    top, bottom = sorted((p[1], q[1]))
    if abs(p[1] - q[1]) < 0.01:
        orientation = "h"
    elif abs(p[0] - q[0]) < 0.01:
        orientation = "v"
    else:
        return  # a slanted stroke is no ruling line
    edges.append(
        {
            "object_type": "line",
            "x0": x0,
            "x1": x1,
            "top": top,
            "bottom": bottom,
            "doctop": top,
            "width": x1 - x0,
            "height": bottom - top,
            "orientation": orientation,
        }
    )
