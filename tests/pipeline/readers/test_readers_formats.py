"""Each format read from a real file built at test time: text and locators."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowbase.errors import EncryptedFile, NoTextExtracted, UnreadableFile, UnsupportedFileType
from knowbase.pipeline.readers import (
    PROCESSABLE_EXTENSIONS,
    SUPPORTED_EXTENSIONS,
    is_supported,
    pdf_pages_without_text,
    read_file,
)

pytestmark = pytest.mark.timeout(60)


def make_pdf(path: Path, pages: list[str | None]) -> Path:
    """A PDF with one page per entry; ``None`` draws a box but no text (a "scan")."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    for text in pages:
        if text is None:
            c.rect(100, 400, 300, 200, fill=1)
        else:
            y = 780
            for line in text.split("\n"):
                c.drawString(72, y, line)
                y -= 16
        c.showPage()
    c.save()
    return path


def test_extension_sets() -> None:
    assert PROCESSABLE_EXTENSIONS <= SUPPORTED_EXTENSIONS
    assert {".pdf", ".png", ".jpg", ".jpeg", ".tif", ".tiff"} == PROCESSABLE_EXTENSIONS
    for ext in (".txt", ".md", ".mdx", ".xlsb", ".ods", ".epub", ".doc", ".ppt", ".htm"):
        assert ext in SUPPORTED_EXTENSIONS
    assert is_supported("Report.PDF") and is_supported("a/b/c.docx")
    assert not is_supported("archive.zip") and not is_supported("program")


def test_unknown_extension_is_unsupported(tmp_path: Path) -> None:
    p = tmp_path / "x.bin"
    p.write_bytes(b"{\x00\x01}")  # binary: text under an unknown extension is read (issue 41)
    with pytest.raises(UnsupportedFileType) as info:
        read_file(p)
    assert info.value.code == "unsupported_file_type"


def test_pdf_pages_have_page_locators_and_skip_empty_pages(tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "three.pdf", ["Alpha page one", None, "Gamma page three\nmore"])
    docs = read_file(pdf)
    assert [d.locator for d in docs] == [{"page": 1}, {"page": 3}]
    assert docs[0].text == "Alpha page one"
    assert docs[1].text == "Gamma page three\nmore"
    assert pdf_pages_without_text(pdf) == [2]


def test_scanned_pdf_has_no_text_and_says_enable_ocr(tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "scan.pdf", [None, None])
    with pytest.raises(NoTextExtracted) as info:
        read_file(pdf)
    assert "OCR" in (info.value.hint or "")
    assert pdf_pages_without_text(pdf) == [1, 2]


def test_encrypted_pdf_needs_a_password(tmp_path: Path) -> None:
    from pypdf import PdfReader, PdfWriter

    plain = make_pdf(tmp_path / "plain.pdf", ["Secret text"])
    writer = PdfWriter()
    writer.append(PdfReader(str(plain)))
    writer.encrypt(user_password="hunter2", owner_password="owner", algorithm="AES-128")
    locked = tmp_path / "locked.pdf"
    with locked.open("wb") as fh:
        writer.write(fh)
    with pytest.raises(EncryptedFile) as info:
        read_file(locked)
    assert info.value.code == "encrypted_file"


def test_pdf_with_empty_user_password_opens(tmp_path: Path) -> None:
    from pypdf import PdfReader, PdfWriter

    plain = make_pdf(tmp_path / "plain.pdf", ["Owner locked only"])
    writer = PdfWriter()
    writer.append(PdfReader(str(plain)))
    writer.encrypt(user_password="", owner_password="owner", algorithm="AES-128")
    locked = tmp_path / "owner.pdf"
    with locked.open("wb") as fh:
        writer.write(fh)
    assert read_file(locked)[0].text == "Owner locked only"


def test_docx_headings_become_heading_paths(tmp_path: Path) -> None:
    import docx

    d = docx.Document()
    d.add_heading("Guide", level=1)
    d.add_paragraph("Welcome to the guide.")
    d.add_heading("Install", level=2)
    d.add_paragraph("Run pip install knowbase.")
    table = d.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Key", "Value"
    table.cell(1, 0).text, table.cell(1, 1).text = "port", "8080"
    d.add_heading("Usage", level=1)
    d.add_paragraph("Search your base.")
    path = tmp_path / "guide.docx"
    d.save(str(path))
    docs = read_file(path)
    assert [d.locator for d in docs] == [
        {"heading": ["Guide"]},
        {"heading": ["Guide", "Install"]},
        {"heading": ["Usage"]},
    ]
    assert docs[0].text.startswith("# Guide") and "Welcome to the guide." in docs[0].text
    assert "Run pip install knowbase." in docs[1].text
    assert "| port | 8080 |" in docs[1].text
    assert "Search your base." in docs[2].text


def test_pptx_one_document_per_slide(tmp_path: Path) -> None:
    from pptx import Presentation
    from pptx.util import Inches

    prs = Presentation()
    s1 = prs.slides.add_slide(prs.slide_layouts[1])
    s1.shapes.title.text = "Quarterly results"
    s1.placeholders[1].text = "Revenue grew 12%"
    s1.notes_slide.notes_text_frame.text = "Mention the new region"
    prs.slides.add_slide(prs.slide_layouts[6])  # blank slide: no document
    s3 = prs.slides.add_slide(prs.slide_layouts[5])
    s3.shapes.title.text = "Plan"
    rows = s3.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    rows.cell(0, 0).text, rows.cell(0, 1).text = "Step", "Owner"
    rows.cell(1, 0).text, rows.cell(1, 1).text = "Hire", "Ana"
    path = tmp_path / "deck.pptx"
    prs.save(str(path))
    docs = read_file(path)
    assert [d.locator for d in docs] == [{"slide": 1}, {"slide": 3}]
    assert docs[0].text.startswith("# Quarterly results")
    assert "Revenue grew 12%" in docs[0].text and "Mention the new region" in docs[0].text
    assert "| Hire | Ana |" in docs[1].text


def test_xlsx_one_table_per_sheet(tmp_path: Path) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Q1"
    ws.append(["Item", "Amount", "Note"])
    ws.append(["Coffee", 3, "a|b"])
    ws.append(["Tea", 2.5, None])
    wb.create_sheet("Empty")
    wb.create_sheet("Q2").append(["Only", "header"])
    path = tmp_path / "book.xlsx"
    wb.save(str(path))
    docs = read_file(path)
    assert [d.locator for d in docs] == [{"sheet": "Q1"}, {"sheet": "Q2"}]
    assert docs[0].text == (
        "| Item | Amount | Note |\n|---|---|---|\n| Coffee | 3 | a\\|b |\n| Tea | 2.5 |  |"
    )
    assert docs[1].text == "| Only | header |\n|---|---|"


def test_csv_with_semicolons_in_cp1252(tmp_path: Path) -> None:
    path = tmp_path / "prices.csv"
    path.write_bytes("Produit;Prix\nCafé crème;2,50 €\nThé;1,80 €\n".encode("cp1252"))
    (doc,) = read_file(path)
    assert doc.locator == {}
    assert doc.text == ("| Produit | Prix |\n|---|---|\n| Café crème | 2,50 € |\n| Thé | 1,80 € |")


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        ("Le café était très «bon» — naïve “quotes”, déjà vu. Ça coûte 5 €.", "cp1252"),
        ("これは日本語のテキストです。東京都は日本の首都です。散歩に行きましょう。", "cp932"),
        ("這是一個繁體中文的測試文件。臺灣的天氣很好，我們去散步吧。", "big5"),
        ("Plain UTF-8 with emoji 🎉 and ünïcödé", "utf-8"),
        ("UTF-16 with a byte-order mark: 你好", "utf-16"),
    ],
)
def test_text_encodings_are_detected(tmp_path: Path, text: str, encoding: str) -> None:
    path = tmp_path / "note.txt"
    path.write_bytes(text.encode(encoding))
    assert read_file(path)[0].text == text


def test_markdown_file_sections(tmp_path: Path) -> None:
    path = tmp_path / "readme.md"
    path.write_text("Intro\n\n# A\n\ntext a\n\n## B\n\ntext b\n", encoding="utf-8")
    docs = read_file(path)
    assert [(d.locator, d.text) for d in docs] == [
        ({}, "Intro"),
        ({"heading": ["A"]}, "# A\n\ntext a"),
        ({"heading": ["A", "B"]}, "## B\n\ntext b"),
    ]


def test_html_to_markdown_drops_scripts(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_text(
        "<html><head><title>T</title><style>p{}</style></head><body>"
        "<script>var secret = 1;</script><h1>Title</h1><p>Hello <b>world</b>.</p>"
        "<h2>Part</h2><ul><li>one</li><li>two</li></ul></body></html>",
        encoding="utf-8",
    )
    docs = read_file(path)
    assert [d.locator for d in docs] == [{"heading": ["Title"]}, {"heading": ["Title", "Part"]}]
    assert docs[0].text == "# Title\n\nHello **world**."
    assert "- one\n- two" in docs[1].text
    assert all("secret" not in d.text for d in docs)


def test_html_declared_charset_wins(tmp_path: Path) -> None:
    path = tmp_path / "sjis.htm"
    body = '<html><head><meta charset="shift_jis"></head><body><p>日本語のページ</p></body></html>'
    path.write_bytes(body.encode("shift_jis"))
    assert read_file(path)[0].text == "日本語のページ"


def test_epub_chapters_with_toc_titles(tmp_path: Path) -> None:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("id1")
    book.set_title("Book")
    book.set_language("en")
    c1 = epub.EpubHtml(title="Beginnings", file_name="c1.xhtml", lang="en")
    c1.content = "<h1>Chapter One</h1><p>It was a dark night.</p>"
    c2 = epub.EpubHtml(title="Endings", file_name="c2.xhtml", lang="en")
    c2.content = "<h1>Chapter Two</h1><p>The sun rose.</p>"
    book.add_item(c1)
    book.add_item(c2)
    book.toc = (epub.Link("c1.xhtml", "Beginnings", "c1"), epub.Link("c2.xhtml", "Endings", "c2"))
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", c1, c2]
    path = tmp_path / "book.epub"
    epub.write_epub(str(path), book)
    docs = [d for d in read_file(path) if "dark night" in d.text or "sun rose" in d.text]
    assert [d.locator for d in docs] == [{"chapter": "Beginnings"}, {"chapter": "Endings"}]
    assert "# Chapter One\n\nIt was a dark night." in docs[0].text


def test_image_without_processor_has_no_text(tmp_path: Path) -> None:
    from PIL import Image

    path = tmp_path / "photo.png"
    Image.new("RGB", (20, 20), "white").save(path)
    with pytest.raises(NoTextExtracted) as info:
        read_file(path)
    assert "OCR" in (info.value.hint or "")


def test_ods_sheets(tmp_path: Path) -> None:
    import zipfile

    content = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
        ' xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"'
        ' xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.2">'
        "<office:body><office:spreadsheet>"
        '<table:table table:name="Budget">'
        '<table:table-row><table:table-cell office:value-type="string"><text:p>Item</text:p>'
        '</table:table-cell><table:table-cell office:value-type="string"><text:p>Cost</text:p>'
        "</table:table-cell></table:table-row>"
        '<table:table-row><table:table-cell office:value-type="string"><text:p>Rent</text:p>'
        '</table:table-cell><table:table-cell office:value-type="float" office:value="900">'
        "<text:p>900</text:p></table:table-cell></table:table-row>"
        "</table:table></office:spreadsheet></office:body></office:document-content>"
    )
    path = tmp_path / "budget.ods"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("mimetype", "application/vnd.oasis.opendocument.spreadsheet")
        zf.writestr("content.xml", content)
        zf.writestr(
            "META-INF/manifest.xml",
            '<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:'
            'xmlns:manifest:1.0">'
            '<manifest:file-entry manifest:full-path="/" manifest:media-type='
            '"application/vnd.oasis.opendocument.spreadsheet"/></manifest:manifest>',
        )
    (doc,) = read_file(path)
    assert doc.locator == {"sheet": "Budget"}
    assert doc.text == "| Item | Cost |\n|---|---|\n| Rent | 900 |"


# --- text a user sees reaches the text (issue 12 item 9) ---------------------------------------
_OMML_NS = (
    'xmlns:m="http://schemas.openxmlformats.org/officeDocument/2006/math" '
    'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
)


def _math_run(text: str) -> str:
    return f'<m:r><w:rPr><w:rFonts w:ascii="Cambria Math"/></w:rPr><m:t>{text}</m:t></m:r>'


def test_docx_equations_reach_the_text(tmp_path: Path) -> None:
    import docx
    from docx.oxml import parse_xml

    inline = (
        f"<m:oMath {_OMML_NS}>{_math_run('E=m')}"
        f"<m:sSup><m:e>{_math_run('c')}</m:e><m:sup>{_math_run('2')}</m:sup></m:sSup></m:oMath>"
    )
    display = (
        f"<m:oMathPara {_OMML_NS}><m:oMath>"
        f"<m:f><m:num>{_math_run('a+b')}</m:num><m:den>{_math_run('2')}</m:den></m:f>"
        f"{_math_run('=x_1')}</m:oMath></m:oMathPara>"
    )
    d = docx.Document()
    d.add_heading("Physics", level=1)
    p = d.add_paragraph("Energy is ")
    p._p.append(parse_xml(inline))
    p.add_run(" as Einstein wrote.")
    d.add_paragraph()._p.append(parse_xml(display))
    d.add_paragraph("After the equations.")
    path = tmp_path / "physics.docx"
    d.save(str(path))
    docs = read_file(path)
    assert [doc.locator for doc in docs] == [{"heading": ["Physics"]}]
    text = docs[0].text
    assert "Energy is E=mc^2 as Einstein wrote." in text  # inline, in reading order
    assert "(a+b)/2=x_1" in text  # display equation, its own paragraph
    assert text.index("x_1") < text.index("After the equations.")


def test_pptx_title_once_and_chart_titles(tmp_path: Path) -> None:
    from pptx import Presentation
    from pptx.chart.data import CategoryChartData
    from pptx.enum.chart import XL_CHART_TYPE
    from pptx.util import Inches

    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[5])  # title only
    slide.shapes.title.text = "Sales"
    data = CategoryChartData()
    data.categories = ["Q1", "Q2"]
    data.add_series("Revenue", (1.0, 2.0))
    frame = slide.shapes.add_chart(
        XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(2), Inches(4), Inches(3), data
    )
    frame.chart.has_title = True
    frame.chart.chart_title.text_frame.text = "Revenue by quarter"
    untitled = prs.slides.add_slide(prs.slide_layouts[6])
    untitled.shapes.add_chart(
        XL_CHART_TYPE.PIE, Inches(1), Inches(1), Inches(3), Inches(3), data
    ).chart.has_title = False
    path = tmp_path / "sales.pptx"
    prs.save(str(path))
    docs = read_file(path)
    assert [d.locator for d in docs] == [{"slide": 1}]  # a chart without a title adds no text
    assert docs[0].text == "# Sales\n\nRevenue by quarter"  # the title once, then the chart's


def test_truncated_pdf_message_names_the_marker(tmp_path: Path) -> None:
    # The marker IS spelled "%%EOF" (PDF 1.7 §7.5.5); the message says what it is, so the two
    # percent signs read as its name and not as a formatting slip.
    whole = make_pdf(tmp_path / "whole.pdf", ["Some text"]).read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(whole[: whole.rindex(b"%%EOF")])
    with pytest.raises(UnreadableFile, match="truncated") as info:
        read_file(cut)
    assert "end-of-file marker '%%EOF'" in str(info.value)
    assert "%%%" not in str(info.value)
