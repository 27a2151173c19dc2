"""PDF → structured Markdown (issue 28): tables, headings, broken words, columns, sideways pages.

The PDFs are drawn at test time with reportlab; the last test reads the real PDFs of
``../shared/tables-dev`` when that set is present (skipped with the reason otherwise).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from knowbase.pipeline.readers import read_file

pytestmark = pytest.mark.timeout(120)

ROWS = [
    ["Region", "2019", "2020", "2021"],
    ["North", "1,204", "1,377", "1,502"],
    ["South", "988", "1,020", "1,141"],
    ["East", "2,310", "2,298", "2,405"],
    ["West", "740", "812", "866"],
]
SET_DIR = Path(__file__).resolve().parents[4] / "shared" / "tables-dev"


def _canvas(path: Path):
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    return canvas.Canvas(str(path), pagesize=A4)


def _grid(c, x: float, y: float, rows: list[list[str]], ruled: bool, w: float = 90) -> None:
    h = 18
    for i, row in enumerate(rows):
        for j, cell in enumerate(row):
            c.drawString(x + j * w + 4, y - (i + 1) * h + 5, cell)
    if ruled:
        for i in range(len(rows) + 1):
            c.line(x, y - i * h, x + w * len(rows[0]), y - i * h)
        for j in range(len(rows[0]) + 1):
            c.line(x + j * w, y, x + j * w, y - h * len(rows))


def _table_lines(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in ln.strip("|").split("|")]
        for ln in text.split("\n")
        if ln.startswith("|") and not set(ln) <= set("|-: ")
    ]


@pytest.mark.parametrize("ruled", [True, False], ids=["ruled", "text-aligned"])
def test_pdf_table_becomes_a_markdown_table_with_heading(tmp_path: Path, ruled: bool) -> None:
    pdf = tmp_path / "report.pdf"
    c = _canvas(pdf)
    c.setFont("Helvetica-Bold", 20)
    c.drawString(72, 780, "Annual Sales")
    c.setFont("Helvetica", 10)
    c.drawString(72, 750, "Sales by region, in units, for the last three years.")
    _grid(c, 72, 720, ROWS, ruled)
    c.drawString(72, 580, "Figures are audited.")
    c.showPage()
    c.save()
    docs = read_file(pdf)
    text = "\n\n".join(d.text for d in docs)
    assert text.startswith("# Annual Sales\n"), text
    assert _table_lines(text) == ROWS, text
    assert text.index("Sales by region") < text.index("| Region") < text.index("Figures are")
    assert all(d.locator["page"] == 1 for d in docs)
    assert docs[-1].locator["heading"] == ["Annual Sales"]


def test_heading_path_carries_over_pages_and_words_are_joined(tmp_path: Path) -> None:
    # An embedded TrueType font maps the soft hyphen to U+00AD (ToUnicode), as office suites
    # and TeX do; reportlab's built-in Helvetica would encode it as WinAnsi 0xAD, which
    # pdfminer reads as a space.
    font = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
    if not font.is_file():
        pytest.skip(f"needs {font} (Debian fonts-dejavu-core)")
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont

    pdfmetrics.registerFont(TTFont("DejaVuSans", str(font)))
    pdf = tmp_path / "manual.pdf"
    c = _canvas(pdf)
    c.setFont("Helvetica-Bold", 18)
    c.drawString(72, 780, "Installation")
    c.setFont("DejaVuSans", 10)
    c.drawString(72, 750, "Keep the parts sepa\u00ad")
    c.drawString(72, 736, "rated from the en-")
    c.drawString(72, 722, "vironment until the 2019-")
    c.drawString(72, 708, "2020 season.")
    c.showPage()
    c.setFont("Helvetica", 10)
    c.drawString(72, 780, "Second page text without its own heading.")
    c.showPage()
    c.save()
    docs = read_file(pdf)
    body = docs[0].text
    assert "separated" in body and "environment" in body and "\u00ad" not in body
    assert "2019-\n2020" in body  # a hyphen before a digit is not a line-end break
    assert docs[-1].locator == {"page": 2, "heading": ["Installation"]}


PROSE = (
    "The committee met in spring to review the budget and the plans for the new library. "
    "Several members asked whether the reading rooms could stay open later in winter, when "
    "students need quiet places to work. The treasurer answered that heating costs would rise "
    "but that a grant from the county might cover most of the difference over two years. "
    "After a long discussion the proposal was accepted with one abstention and no votes against."
)


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width)


def test_two_columns_are_read_one_after_the_other(tmp_path: Path) -> None:
    pdf = tmp_path / "cols.pdf"
    c = _canvas(pdf)
    c.setFont("Helvetica", 10)
    left, right = _wrap("LEFT " + PROSE, 45), _wrap("RIGHT " + PROSE[::-1].title(), 45)
    for i, (a, b) in enumerate(zip(left, right, strict=False)):
        c.drawString(60, 760 - i * 14, a)
        c.drawString(320, 760 - i * 14, b)
    c.showPage()
    c.save()
    text = read_file(pdf)[0].text
    assert "|" not in text, text
    assert text.index(left[-1]) < text.index("RIGHT"), text


def test_prose_never_becomes_a_table(tmp_path: Path) -> None:
    pdf = tmp_path / "prose.pdf"
    c = _canvas(pdf)
    c.setFont("Helvetica", 10)
    for i, line in enumerate(_wrap(PROSE * 3, 95)):
        c.drawString(72, 760 - i * 14, line)
    c.showPage()
    c.save()
    text = read_file(pdf)[0].text
    assert "|" not in text
    assert text.replace("\n", " ") == " ".join(_wrap(PROSE * 3, 95))


def test_a_sideways_table_is_turned_upright(tmp_path: Path) -> None:
    pdf = tmp_path / "sideways.pdf"
    c = _canvas(pdf)
    c.translate(500, 100)
    c.rotate(90)  # the table reads bottom to top on the portrait page
    c.setFont("Helvetica", 10)
    _grid(c, 0, 300, ROWS, ruled=True)
    c.showPage()
    c.save()
    assert _table_lines(read_file(pdf)[0].text) == ROWS


def _bench():
    path = Path(__file__).resolve().parents[3] / "bench" / "pdf_tables.py"
    spec = importlib.util.spec_from_file_location("pdf_tables_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("name", "floor"),
    [("twotables_2.pdf", 0.95), ("health.pdf", 0.9), ("clockwise_table_1.pdf", 0.95)],
)
def test_real_pdf_tables_from_the_dev_set(name: str, floor: float) -> None:
    if not (SET_DIR / "expected.jsonl").is_file():
        pytest.skip(f"the table set is absent: {SET_DIR} (see bench/pdf_tables.py)")
    bench = _bench()
    expected = [
        row
        for line in (SET_DIR / "expected.jsonl").read_text(encoding="utf-8").splitlines()
        if (row := json.loads(line))["primary"] and row["file"] == name
    ]
    text = "\n\n".join(
        d.text for d in read_file(SET_DIR / "files" / name) if d.locator["page"] == 1
    )
    tables = bench.markdown_tables(text)
    for exp in expected:
        assert bench.score(exp["rows"], tables, arabic=False) >= floor


def test_pages_past_the_time_budget_are_read_as_plain_text(tmp_path: Path) -> None:
    from knowbase.pipeline.readers.pdf import pdf_page_texts

    pdf = tmp_path / "long.pdf"
    c = _canvas(pdf)
    for page in range(3):
        c.setFont("Helvetica", 10)
        c.drawString(72, 760, f"Page {page + 1} shows the sales table.")
        _grid(c, 72, 720, ROWS, ruled=True)
        c.showPage()
    c.save()
    full = pdf_page_texts(pdf)
    assert all(_table_lines(t) == ROWS for t in full)
    cut = pdf_page_texts(pdf, budget_s=0)  # the first page is always read with structure
    assert _table_lines(cut[0]) == ROWS
    assert [_table_lines(t) for t in cut[1:]] == [[], []]
    assert all("sales table" in t and "North" in t for t in cut)


def test_words_set_without_space_glyphs_stay_apart(tmp_path: Path) -> None:
    # DocBook/FOP output places each word on its own, 2.2 pt apart, with no space character;
    # pdfplumber's fixed 3 pt word gap read such lines as one long word.
    from reportlab.pdfbase.pdfmetrics import stringWidth

    pdf = tmp_path / "tight.pdf"
    c = _canvas(pdf)
    c.setFont("Helvetica", 10)
    x = 72.0
    for word in ["Many", "programs", "use", "the", "MIME", "system"]:
        c.drawString(x, 760, word)
        x += stringWidth(word, "Helvetica", 10) + 2.2
    c.showPage()
    c.save()
    assert read_file(pdf)[0].text == "Many programs use the MIME system"


def test_justified_prose_never_becomes_a_table(tmp_path: Path) -> None:
    # Justified lines line their word gaps up by chance: pdfplumber's text-alignment finder
    # then returns a "table" whose columns are ordinary word spaces.
    from reportlab.lib.enums import TA_JUSTIFY
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.platypus import Paragraph, SimpleDocTemplate

    pdf = tmp_path / "justified.pdf"
    style = ParagraphStyle("j", fontName="Times-Roman", fontSize=10, leading=12)
    style.alignment = TA_JUSTIFY
    SimpleDocTemplate(str(pdf), pagesize=A4).build(
        [Paragraph(" ".join([PROSE] * 4), style), Paragraph(" ".join([PROSE[::-1]] * 3), style)]
    )
    text = read_file(pdf)[0].text
    assert "|" not in text
    assert text.startswith("The committee met in spring to review the budget")
