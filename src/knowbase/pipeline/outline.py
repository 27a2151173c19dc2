"""A document's outline from what its reader already produced: no model, no new storage.

Input is what the index keeps per document: its ``content_text`` (the Markdown the readers
wrote, documents joined by a blank line) and its units (chunks) with their char ranges and
locators. The outline is computed from those, so every indexed document has one, on every
backend, without a reindex.

Which structure a document gets, first that applies:

1. **Slides, sheets, chapters** (``{"slide": n}``, ``{"sheet": name}``, ``{"chapter": c}``
   locators): one top node per slide / sheet / chapter, titled by its title heading (a slide's
   ``# Title``) or its name; headings inside a slide or chapter become its children.
2. **Headings** (some unit located ``{"heading": [...]}``: Markdown, HTML, DOCX, RST, PDF
   with headings): the heading tree of the text. Text before the first heading is a node of
   its own. A PDF heading's locator also carries the page it starts on.
3. **Pages** (``{"page": n}`` only: a PDF without headings, OCR output): one node per page;
   a paged text with heading lines (a PDF read through the OCR processor) gets its heading
   tree, each node with the page it starts on.
4. **Windows** (plain text, code, CSV…): consecutive parts of at most
   :data:`WINDOW_TOKENS` tokens, cut at a paragraph or line break, titled by their first line.

Node ids number the tree (``"2"``, ``"2.1"``, ``"2.1.3"``); ``char_start``/``char_end`` cover
the node and everything under it; ``tokens`` is :func:`estimate_tokens` of that range. Tables
(caption line, else header row) and figures (caption) are listed on the innermost node that
holds them.

    >>> nodes = build_outline("# A\\nx\\n\\n## B\\ny", [Span(0, 5, {"heading": ["A"]})])
    >>> [(n.id, n.title, n.depth, n.char_start, n.char_end) for n in nodes]
    [('1', 'A', 0, 0, 13), ('1.1', 'B', 1, 7, 13)]
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from knowbase.pipeline.indexing.tokens import CHARS_PER_TOKEN, RangeTokens, estimate_tokens
from knowbase.pipeline.readers.markdown import heading_offsets

__all__ = [
    "WINDOW_TOKENS",
    "OutlineNode",
    "Part",
    "Span",
    "build_outline",
    "cut_for_tokens",
    "outline_kind",
]

WINDOW_TOKENS = 1_000
"""Tokens per node of a document without any structure (plain text, code)."""
LABEL_MAX_CHARS = 120
SEGMENT_KEYS = ("slide", "sheet", "chapter")

_TABLE = re.compile(r"^\|(.*)\|[ \t]*\n\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$",
                    re.M)  # fmt: skip
_TABLE_CAPTION = re.compile(r"^\W{0,3}(?:table|tab\.|tabelle|tableau|tabla|表)\s*[\dIVXivx]", re.I)
_IMAGE = re.compile(r"!\[([^\]\n]*)\]\(")


class Located(Protocol):
    """What a unit brings: its range in ``content_text`` and its reader's locator."""

    @property
    def char_start(self) -> int: ...
    @property
    def char_end(self) -> int: ...
    @property
    def locator(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Span:
    """A located range (a unit, a chunk); enough to build an outline in tests."""

    char_start: int
    char_end: int
    locator: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Part:
    """A table or a figure under a node: ``label`` is its caption or its header row."""

    kind: str  # "table" | "figure"
    label: str
    char_start: int


@dataclass
class OutlineNode:
    """One section of a document (a heading, slide, sheet, chapter, page or window)."""

    id: str
    title: str
    depth: int
    char_start: int
    char_end: int
    path: list[str]
    locator: dict[str, Any]
    tokens: int = 0
    tables: list[Part] = field(default_factory=list)
    figures: list[Part] = field(default_factory=list)


def outline_kind(units: Sequence[Located], text: str | None = None) -> str:
    """Which structure :func:`build_outline` uses: ``slides``, ``sheets``, ``chapters``,
    ``headings``, ``pages`` or ``windows``. A paged document whose text has heading lines
    (a PDF read through the OCR processor: its pages with a text layer keep their ``#``
    headings, its locators only the page) is ``headings``, with ``text`` given."""
    keys = set().union(*(u.locator.keys() for u in units)) if units else set()
    for key in SEGMENT_KEYS:
        if key in keys:
            return key + "s"
    if "heading" in keys:
        return "headings"
    if "page" in keys:
        return "headings" if text is not None and heading_offsets(text) else "pages"
    return "windows"


def build_outline(text: str, units: Sequence[Located]) -> list[OutlineNode]:
    """The outline of one document as a pre-order list of nodes (see the module docstring)."""
    units = sorted(units, key=lambda u: (u.char_start, u.char_end))
    kind = outline_kind(units, text)
    if kind in ("slides", "sheets", "chapters"):
        nodes = _segment_nodes(text, units, kind[:-1])
    elif kind == "headings":
        headings = _headings(text, units)
        nodes = _heading_nodes(text, headings, 0, len(text), _Units(units), 0, "")
    elif kind == "pages":
        nodes = _segment_nodes(text, units, "page")
    else:
        nodes = _window_nodes(text)
    counter = RangeTokens(text)
    for node in nodes:
        node.char_end = _trim_end(text, node.char_start, node.char_end)
        node.tokens = counter.count(node.char_start, node.char_end)
    _attach_parts(text, units, nodes)
    return nodes


# --- structures ---------------------------------------------------------------------------------
def _segments(units: Sequence[Located], key: str) -> list[tuple[Any, int, int]]:
    """``(value, start, end)`` runs of consecutive units with the same ``key`` value."""
    runs: list[tuple[Any, int, int]] = []
    for u in units:
        if key not in u.locator:
            continue
        value = u.locator[key]
        if runs and runs[-1][0] == value:
            runs[-1] = (value, runs[-1][1], max(runs[-1][2], u.char_end))
        else:
            runs.append((value, u.char_start, u.char_end))
    return runs


def _segment_nodes(text: str, units: Sequence[Located], key: str) -> list[OutlineNode]:
    nodes: list[OutlineNode] = []
    runs = _segments(units, key)
    located = _Units(units)
    headed = key in ("slide", "chapter")
    for n, (value, start, end) in enumerate(runs, start=1):
        end = runs[n][1] if n < len(runs) else max(end, len(text))
        headings = heading_offsets(text[start:end]) if headed else []
        title = _segment_title(key, value)
        if headings and not text[start : start + headings[0][2]].strip():
            title = headings[0][1] or title  # the slide's (chapter's) own title line
            headings = headings[1:]
        node = OutlineNode(str(n), title, 0, start, end, [title], {key: value})
        nodes.append(node)
        shifted = [(lv, t, start + off) for lv, t, off in headings]
        if shifted:
            first = shifted[0][2]
            nodes += _heading_nodes(text, shifted, first, end, located, 1, node.id + ".")
    return nodes


def _headings(text: str, units: Sequence[Located]) -> list[tuple[int, str, int]]:
    """``(level, title, offset)`` of the document's headings: its Markdown heading lines,
    unless they miss a title the reader located (a reStructuredText ``~~~`` underline reads
    as a code fence to Markdown); then where each heading path starts in the units."""
    scanned = heading_offsets(text)
    located = {t for u in units for t in u.locator.get("heading", ())}
    if located <= {title for _, title, _ in scanned}:
        return scanned
    found: list[tuple[int, str, int]] = []
    previous: list[str] = []
    for u in units:
        path = list(u.locator.get("heading", ()))
        if not path or path == previous:
            continue
        same = 0
        while same < min(len(path), len(previous)) and path[same] == previous[same]:
            same += 1
        same = min(same, len(path) - 1)  # back to an ancestor's path: a new heading of its title
        found += [(level + 1, path[level], u.char_start) for level in range(same, len(path))]
        previous = path
    return found


def _segment_title(key: str, value: Any) -> str:
    if key == "sheet" or (key == "chapter" and isinstance(value, str)):
        return str(value)
    return f"{key.capitalize()} {value}"


def _heading_nodes(
    text: str,
    headings: list[tuple[int, str, int]],
    start: int,
    end: int,
    units: _Units,
    depth0: int,
    prefix: str,
) -> list[OutlineNode]:
    """The heading tree of ``text[start:end]`` (headings at absolute offsets)."""
    nodes: list[OutlineNode] = []
    counters: list[int] = [0]
    stack: list[tuple[int, OutlineNode]] = []  # (heading level, node)
    first = headings[0][2] if headings else end
    if text[start:first].strip():  # the text before the first heading: "0", so "3" is the third
        nodes.append(_node(prefix + "0", "(start)", depth0, start, first, [], units))
    for level, title, offset in headings:
        while stack and stack[-1][0] >= level:
            _, done = stack.pop()
            done.char_end = offset
        depth = len(stack)
        del counters[depth + 1 :]
        if len(counters) <= depth:
            counters.append(0)
        counters[depth] += 1
        node_id = prefix + ".".join(str(c) for c in counters[: depth + 1])
        path = [n.title for _, n in stack] + [title]
        node = _node(node_id, title, depth0 + depth, offset, end, path, units)
        nodes.append(node)
        stack.append((level, node))
    return nodes


def _node(
    node_id: str,
    title: str,
    depth: int,
    start: int,
    end: int,
    path: list[str],
    units: _Units,
) -> OutlineNode:
    locator: dict[str, Any] = {"heading": path} if path else {}
    unit = units.at(start)
    if unit is not None:
        for key in ("page", *SEGMENT_KEYS):
            if key in unit.locator:
                locator = {key: unit.locator[key], **locator}
                break
    return OutlineNode(node_id, title or "(untitled)", depth, start, end, path or [title], locator)


def _window_nodes(text: str) -> list[OutlineNode]:
    nodes: list[OutlineNode] = []
    start = 0
    while start < len(text):
        cut = cut_for_tokens(text, start, len(text), WINDOW_TOKENS)
        tail = cut == len(text) and len(text) - start < CHARS_PER_TOKEN * WINDOW_TOKENS
        if nodes and tail and estimate_tokens(text[start:]) < WINDOW_TOKENS // 4:
            nodes[-1].char_end = len(text)  # a short tail joins the window before it
            break
        if text[start:cut].strip():
            title = _first_line(text[start:cut])
            nodes.append(OutlineNode(str(len(nodes) + 1), title, 0, start, cut, [title], {}))
        start = cut
    return nodes


def cut_for_tokens(text: str, start: int, end: int, max_tokens: int) -> int:
    """Where a slice from ``start`` within ``max_tokens`` (estimated) should end, ≤ ``end``:
    at a paragraph break, else a line break, else a space in its last third, else where the
    budget runs out. Always past ``start`` when ``start < end``.

        >>> cut_for_tokens("one two\\n\\nthree four five", 0, 23, 3)
        9
    """
    # Any character is at least 1/4 token, so the answer lies within 4 × max_tokens chars.
    hi = min(end, start + CHARS_PER_TOKEN * max(max_tokens, 1) + CHARS_PER_TOKEN)
    if hi == end and estimate_tokens(text[start:end]) <= max_tokens:
        return end
    lo = start
    longest = min(hi, start + CHARS_PER_TOKEN * max(max_tokens, 1))
    if estimate_tokens(text[start:longest]) <= max_tokens:  # no CJK: the bound itself fits
        lo = hi = longest
    while lo < hi:  # the longest slice within the budget
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[start:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    cut = max(lo, start + 1)
    floor = start + (cut - start) * 2 // 3
    for sep in ("\n\n", "\n", " "):
        i = text.rfind(sep, floor, cut)
        if i > start:
            return i + len(sep)
    return cut


# --- tables and figures -------------------------------------------------------------------------
def _attach_parts(text: str, units: Sequence[Located], nodes: list[OutlineNode]) -> None:
    starts = [n.char_start for n in nodes]

    def owner(offset: int) -> OutlineNode | None:
        i = bisect.bisect_right(starts, offset) - 1
        while i >= 0 and not nodes[i].char_start <= offset < max(nodes[i].char_end, offset + 1):
            i -= 1
        return nodes[i] if i >= 0 else (nodes[0] if nodes else None)

    for match in _TABLE.finditer(text):
        node = owner(match.start())
        if node is None:
            continue
        label = _table_caption(text, match.start()) or _header_label(match.group(1))
        if all(p.label != label for p in node.tables):  # a sheet's blocks repeat the header
            node.tables.append(Part("table", label, match.start()))
    figures: dict[Any, Part] = {}
    for u in units:
        if "figure" in u.locator and u.locator["figure"] not in figures:
            caption = _first_line(text[u.char_start : u.char_end])
            figures[u.locator["figure"]] = Part("figure", caption, u.char_start)
    for match in _IMAGE.finditer(text):
        figures.setdefault(("image", match.start()), Part("figure", _clip(match.group(1)) or
                                                          "(image)", match.start()))  # fmt: skip
    for part in sorted(figures.values(), key=lambda p: p.char_start):
        node = owner(part.char_start)
        if node is not None:
            node.figures.append(part)


def _table_caption(text: str, start: int) -> str:
    """The line right above a table (one blank line allowed) when it reads as a caption."""
    before = text[max(0, start - 400) : start].rstrip("\n").rsplit("\n", 1)[-1].strip()
    return _clip(before) if _TABLE_CAPTION.match(before) else ""


def _header_label(row: str) -> str:
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)]
    return _clip(" | ".join(c for c in cells if c)) or "(table)"


# --- small helpers ------------------------------------------------------------------------------
class _Units:
    """Units sorted by start, found by offset in log time."""

    def __init__(self, units: Sequence[Located]) -> None:
        self.units = units
        self.starts = [u.char_start for u in units]

    def at(self, offset: int) -> Located | None:
        """The unit holding ``offset``, else the first one after it."""
        i = bisect.bisect_right(self.starts, offset) - 1
        if i >= 0 and self.units[i].char_start <= offset < self.units[i].char_end:
            return self.units[i]
        return self.units[i + 1] if i + 1 < len(self.units) else None


def _trim_end(text: str, start: int, end: int) -> int:
    """``end`` moved back over the blank lines that join documents."""
    while end > start and text[end - 1] in " \t\r\n":
        end -= 1
    return end


def _first_line(text: str) -> str:
    for line in text.split("\n"):
        if line.strip():
            return _clip(line.strip().lstrip("#").strip())
    return "(empty)"


def _clip(label: str) -> str:
    label = " ".join(label.split())
    return label if len(label) <= LABEL_MAX_CHARS else label[: LABEL_MAX_CHARS - 1] + "…"
