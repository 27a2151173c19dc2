"""Issue 41 item 2: Arabic and Hebrew from PDFs in logical order (pdfium gives visual order).

The PDFs are drawn with reportlab and DejaVu Sans (Debian: fonts-dejavu-core), the way an RTL
layout engine places them: pure right-to-left lines glyph by glyph from the right margin
leftwards in reading order, mixed lines as the visual strings the bidi algorithm displays.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from knowbase.pipeline.readers import read_file
from knowbase.pipeline.readers.bidi import logical_order

pytestmark = pytest.mark.timeout(60)

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")

RTL_LINES = ["مرحبا بالعالم", "שלום העולם", "اللغة العربية جميلة"]
# (what the page shows, left to right) -> (what a reader reads)
MIXED = {
    "ريبك 42 ددعلا": "العدد 42 كبير",
    "םלוע world םולש": "שלום world עולם",
    "The word ابحرم means hello": "The word مرحبا means hello",
    "ةحفصلا 2024 PDF ىلع": "على PDF 2024 الصفحة",
}


def _rtl_pdf(path: Path) -> Path:
    if not FONT.exists():
        pytest.skip("needs DejaVu Sans: apt-get install fonts-dejavu-core")
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.pdfgen import canvas

    pdfmetrics.registerFont(TTFont("DejaVu", str(FONT)))
    c = canvas.Canvas(str(path))
    c.setFont("DejaVu", 12)
    y = 760.0
    for line in RTL_LINES:  # in reading order, each glyph left of the one before
        x = 520.0
        for ch in line:
            x -= pdfmetrics.stringWidth(ch, "DejaVu", 12)
            c.drawString(x, y, ch)
        y -= 24
    for shown in MIXED:
        c.drawString(520 - pdfmetrics.stringWidth(shown, "DejaVu", 12), y, shown)
        y -= 24
    c.drawString(72, y, "An English line stays as it is.")
    c.save()
    return path


def test_arabic_hebrew_and_mixed_lines_come_out_in_logical_order(tmp_path: Path) -> None:
    text = "\n".join(d.text for d in read_file(_rtl_pdf(tmp_path / "rtl.pdf")))
    lines = [ln.strip() for ln in text.split("\n") if ln.strip()]
    assert lines == [*RTL_LINES, *MIXED.values(), "An English line stays as it is."]


@pytest.mark.parametrize(("shown", "read"), [*MIXED.items(), ("abc 123", "abc 123")])
def test_logical_order_of_one_line(shown: str, read: str) -> None:
    assert logical_order(shown) == read


def test_numbers_and_latin_inside_an_rtl_line_keep_their_own_order() -> None:
    # A Hebrew line holding an English phrase with a number: the phrase reads left to right.
    assert logical_order("םלוע version 3.14 of it םולש") == "שלום version 3.14 of it עולם"
