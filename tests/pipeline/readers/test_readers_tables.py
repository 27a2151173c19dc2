"""Tables in every format come out as Markdown pipe tables with their header row (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowbase.pipeline.readers import read_file

pytestmark = pytest.mark.timeout(60)

ROWS = [["Name", "Year", "Total"], ["Alpha", "2020", "1,234"], ["Beta", "2021", "5,678"]]


def _pipe_rows(text: str) -> list[list[str]]:
    """The pipe-table rows of ``text``, separator lines left out."""
    rows = []
    for line in text.split("\n"):
        if line.startswith("|") and not set(line) <= set("|-: "):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _check(text: str) -> None:
    lines = [ln for ln in text.split("\n") if ln.startswith("|")]
    assert lines[0].replace(" ", "") == "|Name|Year|Total|", text  # the header comes first
    assert set(lines[1]) <= set("|-: ")  # then its separator
    assert _pipe_rows(text) == ROWS


def _docx(path: Path) -> None:
    import docx

    d = docx.Document()
    d.add_heading("Report", 1)
    t = d.add_table(rows=3, cols=3)
    for i, r in enumerate(ROWS):
        for j, c in enumerate(r):
            t.cell(i, j).text = c
    d.save(str(path))


def _pptx(path: Path) -> None:
    import pptx
    from pptx.util import Inches

    p = pptx.Presentation()
    s = p.slides.add_slide(p.slide_layouts[5])
    s.shapes.title.text = "Slide"
    tb = s.shapes.add_table(3, 3, Inches(1), Inches(1), Inches(6), Inches(2)).table
    for i, r in enumerate(ROWS):
        for j, c in enumerate(r):
            tb.cell(i, j).text = c
    p.save(str(path))


def _xlsx(path: Path) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    for r in ROWS:
        wb.active.append(r)
    wb.save(str(path))


def _csv(path: Path) -> None:
    path.write_text("\n".join(",".join(f'"{c}"' for c in r) for r in ROWS), encoding="utf-8")


def _html_body(th: bool) -> str:
    cell = "th" if th else "td"
    head = "<tr>" + "".join(f"<{cell}>{c}</{cell}>" for c in ROWS[0]) + "</tr>"
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in ROWS[1:])
    return f"<h1>Report</h1><table>{head}{body}</table>"


def _html(path: Path) -> None:
    path.write_text(f"<html><body>{_html_body(th=True)}</body></html>", encoding="utf-8")


def _html_no_th(path: Path) -> None:
    path.write_text(f"<html><body>{_html_body(th=False)}</body></html>", encoding="utf-8")


def _epub(path: Path) -> None:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("t")
    book.set_title("T")
    book.set_language("en")
    ch = epub.EpubHtml(title="One", file_name="c1.xhtml")
    ch.content = f"<html><body>{_html_body(th=False)}</body></html>"
    book.add_item(ch)
    book.toc, book.spine = [ch], [ch]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    epub.write_epub(str(path), book)


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("t.docx", _docx),
        ("t.pptx", _pptx),
        ("t.xlsx", _xlsx),
        ("t.csv", _csv),
        ("t.html", _html),
        ("nohead.html", _html_no_th),
        ("t.epub", _epub),
    ],
)
def test_table_is_a_markdown_table_with_its_header(tmp_path: Path, name: str, make) -> None:
    path = tmp_path / name
    make(path)
    text = "\n\n".join(d.text for d in read_file(path))
    _check(text)
