"""HTML → Markdown with headings, links and tables kept.

A local .html file is the user's own material, so the whole body is converted (BeautifulSoup
+ markdownify, as markitdown does), not just trafilatura's "main content" guess, which is
made for fetched web pages and drops sidebars a user may have saved on purpose. Scripts,
styles and other non-text elements are removed first.
"""

from __future__ import annotations

import re
from pathlib import Path

from knowbase.pipeline.documents import Document
from knowbase.pipeline.readers.markdown import read_markdown_text
from knowbase.pipeline.readers.text import decode_text

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_\-]+)""", re.I)
_DROP = ("script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "head")


def read_html_file(path: Path) -> list[Document]:
    """Markdown sections of an HTML file, with heading-path locators."""
    data = path.read_bytes()
    return read_markdown_text(html_to_markdown(_decode_html(data, path.name)))


def _decode_html(data: bytes, name: str) -> str:
    # A declared charset wins over detection (pages in Shift_JIS or GBK usually say so).
    match = _META_CHARSET.search(data[:4096])
    if match:
        try:
            return data.decode(match.group(1).decode("ascii"))
        except (LookupError, UnicodeDecodeError):
            pass
    return decode_text(data, name=name)


def html_to_markdown(html: str) -> str:
    """Convert HTML to Markdown (ATX headings, pipe tables, no images)."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(html, "lxml")
    for tag in soup.find_all(_DROP):
        tag.decompose()
    root = soup.body or soup
    # No backslash escapes of `_`/`*`: the text is searched and read, and `snake_case`, `x_1`
    # or `a*b` must stay what the document says (grep for them found nothing).
    md = MarkdownConverter(
        heading_style="ATX",
        bullets="-",
        strip=["img"],
        escape_underscores=False,
        escape_asterisks=False,
        # A table without <th> (every Word table through mammoth) takes its first row as the
        # header instead of getting an empty header row above it: the header is what a chunk
        # continuing the table repeats.
        table_infer_header=True,
    ).convert_soup(root)
    # markdownify leaves runs of blank lines where block elements were removed.
    md = re.sub(r"\n{3,}", "\n\n", md)
    return "\n".join(line.rstrip() for line in md.split("\n")).strip()
