"""Markdown → one document per heading section, each located by its heading path.

Why split: the splitter never lets a chunk span documents, and every chunk carries its
document's locator, so a section per document is what gives a citation its heading path
(``{"heading": ["Guide", "Install"]}``). Each section keeps its heading line, so the joined text
loses nothing but blank lines at section edges. A heading directly followed by a deeper one
(``# Guide`` then ``## Install``) is merged into that child so no chunk is a bare title.
Text before the first heading has locator ``{}``. Headings inside fenced code blocks and YAML
front matter do not count.

Processed output (OCR, :mod:`knowbase.pipeline.processing`) starts with
:data:`PROCESSED_MARKER` and uses ``## Page N`` headings; :func:`read_markdown_text` hands such
text to :func:`read_processed_markdown`, which maps sections back to ``{"page": N}``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from knowbase.pipeline.documents import Document

PROCESSED_MARKER = "<!-- knowbase:processed -->"
"""First line of every Markdown file a processor writes."""

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_PAGE = re.compile(r"^## Page (\d+)[ \t]*$")
_LOCATOR = re.compile(r"^<!-- knowbase:locator (\{.*\}) -->$")
LOCATOR_LINE = "<!-- knowbase:locator {} -->"
"""Opens a section of processed output whose locator is the JSON object (``locator_line``)."""


@dataclass
class _Section:
    level: int  # 0 = preamble before any heading
    path: list[str]
    lines: list[str] = field(default_factory=list)
    body_blank: bool = True


def read_markdown_text(text: str) -> list[Document]:
    """Split Markdown into heading sections with ``{"heading": [...]}`` locators.

    >>> [d.locator for d in read_markdown_text("# A\\nx\\n## B\\ny\\n")]
    [{'heading': ['A']}, {'heading': ['A', 'B']}]
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.startswith(PROCESSED_MARKER):
        return read_processed_markdown(text)
    sections = _sections(text)
    docs: list[Document] = []
    pending: _Section | None = None  # heading-only section waiting for its first child
    for sec in sections:
        if pending is not None:
            if sec.level > pending.level:
                sec.lines = pending.lines + sec.lines
            else:
                docs.append(_doc(pending))
            pending = None
        if sec.level > 0 and sec.body_blank:
            pending = sec
            continue
        doc = _doc(sec)
        if doc.text:
            docs.append(doc)
    if pending is not None:
        docs.append(_doc(pending))
    return docs


def _doc(sec: _Section) -> Document:
    body = "\n".join(sec.lines).strip("\n").rstrip()
    return Document(body, {"heading": list(sec.path)} if sec.level else {})


def _sections(text: str) -> list[_Section]:
    lines = text.split("\n")
    stack: list[tuple[int, str]] = []
    current = _Section(0, [])
    sections = [current]
    fence: str | None = None
    i = _front_matter_end(lines)
    current.lines.extend(lines[:i])
    current.body_blank = i == 0
    while i < len(lines):
        line = lines[i]
        marker = _FENCE.match(line)
        if fence is not None or marker:
            if fence is None:
                fence = marker.group(1)  # type: ignore[union-attr]
            elif marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
                fence = None
            current.lines.append(line)
            current.body_blank = False
            i += 1
            continue
        heading = _heading(lines, i)
        if heading is None:
            current.lines.append(line)
            current.body_blank = current.body_blank and not line.strip()
            i += 1
            continue
        level, title, used = heading
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        current = _Section(level, [t for _, t in stack])
        sections.append(current)
        current.lines.extend(lines[i : i + used])
        i += used
    return sections


def _heading(lines: list[str], i: int) -> tuple[int, str, int] | None:
    """``(level, title, lines used)`` when a heading starts at line ``i``."""
    atx = _ATX.match(lines[i])
    if atx:
        return len(atx.group(1)), (atx.group(2) or "").strip(), 1
    # Setext: only a single paragraph line right above the underline counts; "---" after a
    # blank line is a thematic break, and list items, quotes or tables are not titles.
    line = lines[i].strip()
    if i + 1 >= len(lines) or not line or (i > 0 and lines[i - 1].strip()):
        return None
    under = _SETEXT.match(lines[i + 1])
    if not under or line.startswith(("-", "*", "+", ">", "|")):
        return None
    return (1 if under.group(1)[0] == "=" else 2), line, 2


def _front_matter_end(lines: list[str]) -> int:
    if not lines or lines[0].strip() != "---":
        return 0
    for i in range(1, min(len(lines), 200)):
        if lines[i].strip() in ("---", "..."):
            return i + 1
    return 0


def read_processed_markdown(text: str) -> list[Document]:
    """Read a processor's output: ``## Page N`` sections → documents located ``{"page": N}``.

    Text without page headings (a single OCR'd image) is one document with locator ``{}``.
    Only increasing page numbers open a section, so a stray "## Page 2" later in page 5's
    text stays text (processors also escape such lines when they write). A
    :func:`locator_line` opens a section with that whole locator (the caption processor's
    ``{"page": 3, "figure": 2}``).
    """
    text = text.replace("\r\n", "\n")
    if text.startswith(PROCESSED_MARKER):
        text = text[len(PROCESSED_MARKER) :]
    docs: list[Document] = []
    page: int | None = None
    buf: list[str] = []
    located: dict | None = None  # set by a locator line: the section's whole locator

    def flush() -> None:
        body = "\n".join(buf).strip()
        if body:
            if located is not None:
                docs.append(Document(body, located))
            else:
                docs.append(Document(body, {"page": page} if page is not None else {}))

    for line in text.split("\n"):
        match = _PAGE.match(line)
        if match and (page is None or int(match.group(1)) > page):
            flush()
            buf = []
            page, located = int(match.group(1)), None
            continue
        loc = _LOCATOR.match(line)
        if loc:
            flush()
            buf = []
            located = _locator(loc.group(1))
            continue
        buf.append(line)
    flush()
    return docs


def locator_line(locator: dict) -> str:
    """The line that opens a section located ``locator`` in processed output."""
    return LOCATOR_LINE.format(json.dumps(locator, ensure_ascii=False, sort_keys=True))


def _locator(raw: str) -> dict:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def escape_page_headings(text: str) -> str:
    """Escape lines of page text that would read back as a ``## Page N`` heading or a
    locator line."""
    return "\n".join(
        "\\" + ln if _PAGE.match(ln) or _LOCATOR.match(ln) else ln for ln in text.split("\n")
    )


def heading_offsets(text: str) -> list[tuple[int, str, int]]:
    """``(level, title, char offset of the heading's first line)`` of every heading in
    ``text``, by the same rules the sections follow (ATX and setext; none inside fenced code
    or front matter). Offsets index ``text`` itself, line ends as they are.

    >>> heading_offsets("# A\\nx\\n\\nB\\n-\\n")
    [(1, 'A', 0), (2, 'B', 7)]
    """
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    found: list[tuple[int, str, int]] = []
    fence: str | None = None
    i = _front_matter_end(lines)
    while i < len(lines):
        marker = _FENCE.match(lines[i])
        if fence is not None or marker:
            if fence is None:
                fence = marker.group(1)  # type: ignore[union-attr]
            elif marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
                fence = None
            i += 1
            continue
        heading = _heading(lines, i)
        if heading is None:
            i += 1
            continue
        level, title, used = heading
        found.append((level, title, starts[i]))
        i += used
    return found
