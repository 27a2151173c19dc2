"""Issue 41 item 3: pages in two and three columns are read column by column; full-width
titles, abstracts and tables stay where they are (PDFs laid out by reportlab's platypus)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from knowbase.pipeline.readers import read_file

pytestmark = pytest.mark.timeout(120)

PHRASE = "otters hold hands while they sleep so that they do not drift apart on the water"
WORDS = PHRASE.split(" ")


def sentences(n: int, start: int = 1) -> str:
    """``n`` numbered sentences, ``S001 …``, so the reading order can be checked."""
    out = []
    for i in range(start, start + n):
        body = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(11))
        out.append(f"S{i:03d} {body}.")
    return " ".join(out)


def build(path: Path, columns: int, n: int, *, paper: bool = False, table: bool = False) -> Path:
    """One A4 page of ``columns`` columns holding sentences S001…S``n`` (they fill every
    column; nothing overflows to a second page), after a full-width title and abstract when
    ``paper``, with a small ruled table in the middle of the text when ``table``."""
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import (
        BaseDocTemplate,
        Frame,
        FrameBreak,
        PageTemplate,
        Paragraph,
        Table,
        TableStyle,
    )

    styles = getSampleStyleSheet()
    width, height = A4
    margin, gap = 50.0, 18.0
    top_h = 190.0 if paper else 0.0
    col_w = (width - 2 * margin - (columns - 1) * gap) / columns
    frames = []
    if paper:
        frames.append(Frame(margin, height - margin - top_h, width - 2 * margin, top_h, id="top"))
    body_h = height - 2 * margin - top_h
    for c in range(columns):
        frames.append(Frame(margin + c * (col_w + gap), margin, col_w, body_h, id=f"c{c}"))

    def footer(canvas, _doc) -> None:  # type: ignore[no-untyped-def]
        canvas.setFont("Helvetica", 9)  # a page number centred across the gutter
        canvas.drawCentredString(width / 2, 25, "Page 1 of 1")

    doc = BaseDocTemplate(str(path), pagesize=A4)
    doc.addPageTemplates([PageTemplate(frames=frames, onPage=footer)])
    story = []
    if paper:
        story.append(Paragraph("Why Otters Hold Hands: A Field Study", styles["Title"]))
        abstract = "Abstract. " + sentences(4, start=900).replace("S9", "A9")
        story.append(Paragraph(abstract, styles["BodyText"]))
        story.append(FrameBreak())
    per = n // 2
    story.append(Paragraph(sentences(per), styles["BodyText"]))
    if table:
        t = Table([["Site", "Otters"], ["North bay", "12"], ["South reef", "7"]])
        t.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.black)]))
        story.append(t)
    story.append(Paragraph(sentences(n - per, start=per + 1), styles["BodyText"]))
    doc.build(story)
    return path


def build_sections(path: Path) -> Path:
    """Two columns (S001-S016), a full-width heading and ruled table across the page, then
    two columns again (S017-S032), each block in its own frame."""
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import (
        BaseDocTemplate,
        Frame,
        FrameBreak,
        PageTemplate,
        Paragraph,
        Table,
        TableStyle,
    )

    styles = getSampleStyleSheet()
    width, height = A4
    margin, gap, mid_h = 50.0, 18.0, 130.0
    col_w = (width - 2 * margin - gap) / 2
    block_h = (height - 2 * margin - mid_h) / 2
    mid_y = margin + block_h
    frames = [
        Frame(margin, mid_y + mid_h, col_w, block_h, id="tl"),
        Frame(margin + col_w + gap, mid_y + mid_h, col_w, block_h, id="tr"),
        Frame(margin, mid_y, width - 2 * margin, mid_h, id="mid"),
        Frame(margin, margin, col_w, block_h, id="bl"),
        Frame(margin + col_w + gap, margin, col_w, block_h, id="br"),
    ]
    doc = BaseDocTemplate(str(path), pagesize=A4)
    doc.addPageTemplates([PageTemplate(frames=frames)])
    table = Table(
        [["Site", "Otters counted", "Pairs holding hands", "Water temperature"],
         ["North bay", "12", "5", "11 C"], ["South reef", "7", "3", "13 C"]],
        colWidths=[(width - 2 * margin) / 4] * 4,
    )  # fmt: skip
    table.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.black)]))
    story = [
        Paragraph(sentences(8, 1), styles["BodyText"]),
        FrameBreak(),
        Paragraph(sentences(8, 9), styles["BodyText"]),
        FrameBreak(),
        Paragraph("Counts at Both Sites Across the Whole Survey Season", styles["Heading1"]),
        table,
        FrameBreak(),
        Paragraph(sentences(8, 17), styles["BodyText"]),
        FrameBreak(),
        Paragraph(sentences(8, 25), styles["BodyText"]),
    ]
    doc.build(story)
    return path


def markers(text: str, prefix: str = "S") -> list[int]:
    return [int(m) for m in re.findall(rf"\b{prefix}(\d{{3}})\b", text)]


def page_text(path: Path) -> str:
    return "\n\n".join(d.text for d in read_file(path))


def one_page(path: Path) -> Path:
    import pypdfium2

    assert len(pypdfium2.PdfDocument(str(path))) == 1
    return path


@pytest.mark.parametrize(("columns", "n"), [(2, 44), (3, 80)])
def test_columns_are_read_one_after_the_other(tmp_path: Path, columns: int, n: int) -> None:
    text = page_text(one_page(build(tmp_path / f"c{columns}.pdf", columns, n)))
    assert markers(text) == list(range(1, n + 1))
    # Every sentence reads whole, across its line breaks.
    flat = re.sub(r"\s+", " ", text)
    assert sentences(1, start=5) in flat


def test_a_paper_reads_title_abstract_then_each_column(tmp_path: Path) -> None:
    text = page_text(one_page(build(tmp_path / "paper.pdf", 2, 30, paper=True)))
    assert text.index("Why Otters Hold Hands") < text.index("Abstract.") < text.index("S001")
    assert markers(text, "A") == [900, 901, 902, 903]
    found = markers(text)
    assert found == list(range(1, 31)), found


def test_a_table_inside_a_column_keeps_the_column_order(tmp_path: Path) -> None:
    text = page_text(one_page(build(tmp_path / "table.pdf", 2, 40, table=True)))
    assert markers(text) == list(range(1, 41))
    assert "North bay" in text


def test_a_full_width_heading_and_table_stay_between_the_column_sections(tmp_path: Path) -> None:
    text = page_text(one_page(build_sections(tmp_path / "sections.pdf")))
    assert markers(text) == list(range(1, 33))
    heading = text.index("Counts at Both Sites")
    assert text.index("S016") < heading < text.index("North bay") < text.index("S017")
