"""Outlines per format: each file is made here, read by its real reader, chunked as indexing
chunks it, and outlined from the joined text and the chunks (what the index keeps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowbase.pipeline.documents import ChunkSettings
from knowbase.pipeline.indexing.chunking import chunk_documents
from knowbase.pipeline.outline import (
    WINDOW_TOKENS,
    OutlineNode,
    Span,
    build_outline,
    cut_for_tokens,
    outline_kind,
)
from knowbase.pipeline.readers import read_file

pytestmark = pytest.mark.timeout(60)


def outline_of(path: Path, chunk_size: int = 64) -> tuple[str, str, list[OutlineNode]]:
    """``(kind, content_text, nodes)`` of a file, chunked small so sections span chunks."""
    text, chunks = chunk_documents(read_file(path), ChunkSettings(chunk_size, chunk_size // 8))
    return outline_kind(chunks), text, build_outline(text, chunks)


def shape(nodes: list[OutlineNode]) -> list[tuple[str, str, int]]:
    return [(n.id, n.title, n.depth) for n in nodes]


def check_ranges(text: str, nodes: list[OutlineNode]) -> None:
    """Every node's range lies in the text, starts at its title (when it has a heading), holds
    its children, and its token count is that of its range."""
    from knowbase.pipeline.indexing.tokens import estimate_tokens

    for node in nodes:
        assert 0 <= node.char_start < node.char_end <= len(text)
        assert node.tokens == estimate_tokens(text[node.char_start : node.char_end])
        for child in nodes:
            if child.id.startswith(node.id + "."):
                assert node.char_start <= child.char_start < child.char_end <= node.char_end


# --- headings -----------------------------------------------------------------------------------
MARKDOWN = """Notes before any heading.

# Guide

Welcome.

## Install

Run pip.

Table 1: Ports

| Key | Value |
|---|---|
| port | 8080 |

## Usage

![Architecture diagram](arch.png)

```sh
# a comment in code, not a heading
```

# Appendix

More.
"""


def test_markdown_heading_tree_with_tables_and_figures(tmp_path: Path) -> None:
    path = tmp_path / "guide.md"
    path.write_text(MARKDOWN, encoding="utf-8")
    kind, text, nodes = outline_of(path)
    assert kind == "headings"
    assert shape(nodes) == [
        ("0", "(start)", 0),
        ("1", "Guide", 0),
        ("1.1", "Install", 1),
        ("1.2", "Usage", 1),
        ("2", "Appendix", 0),
    ]
    check_ranges(text, nodes)
    by_id = {n.id: n for n in nodes}
    assert text[by_id["1.1"].char_start :].startswith("## Install")
    assert text[by_id["1.1"].char_start : by_id["1.1"].char_end].endswith("| port | 8080 |")
    assert by_id["1.1"].locator == {"heading": ["Guide", "Install"]}
    assert [p.label for p in by_id["1.1"].tables] == ["Table 1: Ports"]
    assert [p.label for p in by_id["1.2"].figures] == ["Architecture diagram"]
    assert not by_id["1"].tables and not by_id["2"].figures  # parts sit on their own node


def test_html_headings_and_a_table_by_its_header_row(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_text(
        "<html><head><title>x</title></head><body><h1>Guide</h1><p>Welcome.</p>"
        "<h2>Install</h2><p>Run pip.</p><table><tr><th>Key</th><th>Value</th></tr>"
        "<tr><td>port</td><td>8080</td></tr></table><h3>Linux</h3><p>apt.</p>"
        "<h2>Usage</h2><p>Use it.</p></body></html>",
        encoding="utf-8",
    )
    kind, text, nodes = outline_of(path)
    assert kind == "headings"
    assert shape(nodes) == [
        ("1", "Guide", 0),
        ("1.1", "Install", 1),
        ("1.1.1", "Linux", 2),
        ("1.2", "Usage", 1),
    ]
    check_ranges(text, nodes)
    assert [p.label for p in nodes[1].tables] == ["Key | Value"]
    assert nodes[2].locator == {"heading": ["Guide", "Install", "Linux"]}


def test_docx_headings(tmp_path: Path) -> None:
    import docx

    d = docx.Document()
    d.add_heading("Guide", level=1)
    d.add_paragraph("Welcome to the guide.")
    d.add_heading("Install", level=2)
    table = d.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Key", "Value"
    table.cell(1, 0).text, table.cell(1, 1).text = "port", "8080"
    d.add_heading("Usage", level=1)
    d.add_paragraph("Search your base.")
    path = tmp_path / "guide.docx"
    d.save(str(path))
    kind, text, nodes = outline_of(path)
    assert kind == "headings"
    assert shape(nodes) == [("1", "Guide", 0), ("1.1", "Install", 1), ("2", "Usage", 0)]
    check_ranges(text, nodes)
    assert [p.label for p in nodes[1].tables] == ["Key | Value"]
    assert "Search your base." in text[nodes[2].char_start : nodes[2].char_end]


def _pdf(path: Path, pages: list[list[tuple[int, str]]]) -> Path:
    """A PDF whose pages hold ``(font size, line)`` lines: 20 and 15 read as headings."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    for lines in pages:
        y = 780
        for size, line in lines:
            c.setFont("Helvetica-Bold" if size > 10 else "Helvetica", size)
            c.drawString(72, y, line)
            y -= size + 12
        c.showPage()
    c.save()
    return path


BODY = "Body text of this part of the report, long enough to be prose."


def test_pdf_with_headings_carries_pages(tmp_path: Path) -> None:
    path = _pdf(
        tmp_path / "report.pdf",
        [
            [(20, "Annual Report"), (10, BODY), (15, "Sales"), (10, BODY)],
            [(10, BODY), (20, "Outlook"), (10, BODY)],
        ],
    )
    kind, text, nodes = outline_of(path)
    assert kind == "headings"
    assert shape(nodes) == [("1", "Annual Report", 0), ("1.1", "Sales", 1), ("2", "Outlook", 0)]
    check_ranges(text, nodes)
    assert nodes[1].locator == {"page": 1, "heading": ["Annual Report", "Sales"]}
    assert nodes[2].locator == {"page": 2, "heading": ["Outlook"]}
    # Sales runs on over the page break until the next heading of its level or above.
    assert text.index(BODY, text.index("Sales")) < nodes[1].char_end <= nodes[2].char_start


def test_pdf_without_headings_is_outlined_by_page(tmp_path: Path) -> None:
    path = _pdf(tmp_path / "plain.pdf", [[(10, f"Page {n} says {BODY}")] for n in (1, 2, 3)])
    kind, text, nodes = outline_of(path)
    assert kind == "pages"
    assert shape(nodes) == [("1", "Page 1", 0), ("2", "Page 2", 0), ("3", "Page 3", 0)]
    assert [n.locator for n in nodes] == [{"page": 1}, {"page": 2}, {"page": 3}]
    check_ranges(text, nodes)
    assert text[nodes[1].char_start : nodes[1].char_end].startswith("Page 2 says")


def test_pptx_slide_titles(tmp_path: Path) -> None:
    from pptx import Presentation
    from pptx.util import Inches

    prs = Presentation()
    s1 = prs.slides.add_slide(prs.slide_layouts[1])
    s1.shapes.title.text = "Quarterly results"
    s1.placeholders[1].text = "Revenue grew 12%"
    s1.notes_slide.notes_text_frame.text = "Mention the new region"
    prs.slides.add_slide(prs.slide_layouts[6])  # blank: no text, no node
    s3 = prs.slides.add_slide(prs.slide_layouts[5])
    s3.shapes.title.text = "Plan"
    rows = s3.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    rows.cell(0, 0).text, rows.cell(0, 1).text = "Step", "Owner"
    rows.cell(1, 0).text, rows.cell(1, 1).text = "Hire", "Ana"
    s4 = prs.slides.add_slide(prs.slide_layouts[6])
    box = s4.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1))
    box.text_frame.text = "A slide without a title"
    path = tmp_path / "deck.pptx"
    prs.save(str(path))
    kind, text, nodes = outline_of(path)
    assert kind == "slides"
    assert shape(nodes) == [
        ("1", "Quarterly results", 0),
        ("1.1", "Notes", 1),
        ("2", "Plan", 0),
        ("3", "Slide 4", 0),
    ]
    assert [n.locator for n in nodes] == [
        {"slide": 1},
        {"slide": 1, "heading": ["Notes"]},
        {"slide": 3},
        {"slide": 4},
    ]
    check_ranges(text, nodes)
    assert [p.label for p in nodes[2].tables] == ["Step | Owner"]


def test_xlsx_sheet_names_and_header_rows(tmp_path: Path) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Q1"
    ws.append(["Item", "Amount"])
    for n in range(300):  # long enough for several blocks, each repeating the header
        ws.append([f"item {n} with a longer name", n])
    wb.create_sheet("Empty")
    wb.create_sheet("Q2").append(["Only", "header"])
    path = tmp_path / "book.xlsx"
    wb.save(str(path))
    kind, text, nodes = outline_of(path)
    assert kind == "sheets"
    assert shape(nodes) == [("1", "Q1", 0), ("2", "Q2", 0)]
    assert [n.locator for n in nodes] == [{"sheet": "Q1"}, {"sheet": "Q2"}]
    check_ranges(text, nodes)
    assert [p.label for p in nodes[0].tables] == ["Item | Amount"]
    assert [p.label for p in nodes[1].tables] == ["Only | header"]


def test_plain_text_gets_token_windows(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text(
        "\n\n".join(f"Paragraph {n}. " + "word " * 150 for n in range(20)), encoding="utf-8"
    )
    kind, text, nodes = outline_of(path)
    assert kind == "windows"
    assert len(nodes) >= 4
    assert all(n.tokens <= WINDOW_TOKENS * 5 // 4 for n in nodes)
    assert nodes[0].char_start == 0 and nodes[-1].char_end == len(text.rstrip())
    for a, b in zip(nodes, nodes[1:], strict=False):
        assert text[b.char_start :].startswith("Paragraph")  # cut at a paragraph break
        assert not text[a.char_end : b.char_start].strip()
    assert nodes[0].title.startswith("Paragraph 0.")


# --- pure cases ---------------------------------------------------------------------------------
def test_figures_located_by_the_reader_sit_under_their_node() -> None:
    text = "# Report\n\nText.\n\nFigure 1: a red bar chart\n\n# End\n\nBye."
    cap, end = text.index("Figure 1"), text.index("chart") + len("chart")
    units = [
        Span(0, cap - 2, {"heading": ["Report"]}),
        Span(cap, end, {"heading": ["Report"], "figure": 1}),
        Span(end + 2, len(text), {"heading": ["End"]}),
    ]
    nodes = build_outline(text, units)
    assert [(n.id, [f.label for f in n.figures]) for n in nodes] == [
        ("1", ["Figure 1: a red bar chart"]),
        ("2", []),
    ]


def test_headings_in_code_or_plain_text_do_not_count() -> None:
    code = "# a comment\nx = 1\n\n# another\ny = 2\n"
    assert outline_kind([Span(0, len(code))]) == "windows"
    assert [n.title for n in build_outline(code, [Span(0, len(code))])] == ["a comment"]


def test_empty_document_has_no_nodes() -> None:
    assert build_outline("", []) == []


def test_cut_for_tokens_prefers_paragraphs_and_stays_in_budget() -> None:
    from knowbase.pipeline.indexing.tokens import estimate_tokens

    text = ("A sentence of prose here. " * 10 + "\n\n") * 20
    start = 0
    while start < len(text):
        cut = cut_for_tokens(text, start, len(text), 100)
        assert cut > start and estimate_tokens(text[start:cut]) <= 100
        assert cut == len(text) or text[cut - 2 : cut] == "\n\n" or text[cut - 1] in " \n"
        start = cut
    cjk = "知识库" * 100
    cut = cut_for_tokens(cjk, 0, len(cjk), 50)
    assert cut == 50  # one token per CJK character


def test_epub_chapters(tmp_path: Path) -> None:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("id1")
    book.set_title("Book")
    book.set_language("en")
    c1 = epub.EpubHtml(title="Beginnings", file_name="c1.xhtml", lang="en")
    c1.content = "<h1>Chapter One</h1><p>It was a dark night.</p><h2>Later</h2><p>Rain.</p>"
    c2 = epub.EpubHtml(title="Endings", file_name="c2.xhtml", lang="en")
    c2.content = "<p>The sun rose.</p>"
    book.add_item(c1)
    book.add_item(c2)
    book.toc = (epub.Link("c1.xhtml", "Beginnings", "c1"), epub.Link("c2.xhtml", "Endings", "c2"))
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = [c1, c2]
    path = tmp_path / "book.epub"
    epub.write_epub(str(path), book)
    kind, text, nodes = outline_of(path)
    assert kind == "chapters"
    chapters = [(n.id, n.title, n.depth, n.locator) for n in nodes]
    assert chapters == [
        ("1", "Chapter One", 0, {"chapter": "Beginnings"}),
        ("1.1", "Later", 1, {"chapter": "Beginnings", "heading": ["Later"]}),
        ("2", "Endings", 0, {"chapter": "Endings"}),
    ]
    check_ranges(text, nodes)


def test_restructuredtext_headings_come_from_the_readers_locators(tmp_path: Path) -> None:
    # "~~~~~~" under a title is a code fence to Markdown: the heading lines alone would lose
    # "Sub A1" and everything after it.
    path = tmp_path / "guide.rst"
    path.write_text(
        "Title\n=====\n\nIntro text.\n\nSection A\n---------\n\nBody a.\n\n"
        "Sub A1\n~~~~~~\n\nBody a1.\n\nSection B\n---------\n\nBody b.\n",
        encoding="utf-8",
    )
    kind, text, nodes = outline_of(path)
    assert kind == "headings"
    assert shape(nodes) == [
        ("1", "Title", 0),
        ("1.1", "Section A", 1),
        ("1.1.1", "Sub A1", 2),
        ("1.2", "Section B", 1),
    ]
    check_ranges(text, nodes)
    assert text[nodes[2].char_start :].startswith("Sub A1\n~~~~~~")
    assert text[nodes[3].char_start : nodes[3].char_end].endswith("Body b.")


def test_a_pdf_read_through_the_ocr_processor_keeps_its_headings() -> None:
    # The processor's Markdown (pages with a text layer read by the structured reader) reads
    # back located by page only; its "#" lines are still the PDF's headings.
    from knowbase.pipeline.readers import PROCESSED_MARKER, read_markdown_text

    processed = (
        f"{PROCESSED_MARKER}\n\n## Page 1\n\n# Annual Report\n\n{BODY}\n\n## Sales\n\n{BODY}"
        f"\n\n## Page 2\n\n{BODY}\n\n# Outlook\n\n{BODY}\n\n## Page 3\n\nScanned words.\n"
    )
    text, chunks = chunk_documents(read_markdown_text(processed), ChunkSettings(64, 8))
    assert outline_kind(chunks) == "pages" and outline_kind(chunks, text) == "headings"
    nodes = build_outline(text, chunks)
    assert [(n.id, n.title, n.locator) for n in nodes] == [
        ("1", "Annual Report", {"page": 1, "heading": ["Annual Report"]}),
        ("1.1", "Sales", {"page": 1, "heading": ["Annual Report", "Sales"]}),
        ("2", "Outlook", {"page": 2, "heading": ["Outlook"]}),
    ]
    check_ranges(text, nodes)
    assert text[nodes[2].char_start : nodes[2].char_end].endswith("Scanned words.")
