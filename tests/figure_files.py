"""Files with figures for the caption tests: a PDF, a DOCX and a PPTX made here, each holding
solid-colour pictures the loopback vision server (:mod:`vision_server`) captions by colour."""

from __future__ import annotations

import io
from pathlib import Path

from vision_server import colour_image

RED, BLUE, GREEN = (220, 30, 30), (30, 30, 220), (30, 180, 30)


def make_pdf(path: Path, tmp: Path) -> Path:
    """Page 1: text, then a red figure; page 2: text only; page 3: a blue figure only."""
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path))
    c.drawString(72, 760, "Rainfall in Lisbon is measured every quarter.")
    c.drawImage(ImageReader(io.BytesIO(colour_image(RED))), 72, 500, 160, 120)
    c.drawImage(ImageReader(io.BytesIO(colour_image(GREEN, (10, 10)))), 300, 500, 10, 10)
    c.showPage()
    c.drawString(72, 760, "The second page has words and no figure.")
    c.showPage()
    c.drawImage(ImageReader(io.BytesIO(colour_image(BLUE))), 72, 500, 160, 120)
    c.showPage()
    c.save()
    return path


def make_docx(path: Path, tmp: Path) -> Path:
    """Section "Results": text, a red picture, text; section "Turbines": a blue picture."""
    import docx

    red, blue, icon = tmp / "red.png", tmp / "blue.png", tmp / "icon.png"
    red.write_bytes(colour_image(RED))
    blue.write_bytes(colour_image(BLUE))
    icon.write_bytes(colour_image(GREEN, (16, 16)))
    d = docx.Document()
    d.add_heading("Results", level=1)
    d.add_paragraph("Before the chart comes its introduction.")
    d.add_picture(str(red))
    d.add_paragraph("After the chart comes its discussion.")
    d.add_picture(str(icon))  # an icon: too small to caption
    d.add_heading("Turbines", level=1)
    d.add_picture(str(blue))
    d.save(str(path))
    return path


def make_pptx(path: Path, tmp: Path) -> Path:
    """Slide 1: a title and a green picture inside a group; slide 2: text only."""
    from pptx import Presentation
    from pptx.util import Inches

    green = tmp / "green.png"
    green.write_bytes(colour_image(GREEN))
    prs = Presentation()
    s1 = prs.slides.add_slide(prs.slide_layouts[5])
    s1.shapes.title.text = "Harbour plan"
    group = s1.shapes.add_group_shape()
    group.shapes.add_picture(str(green), Inches(1), Inches(2), Inches(3))
    s2 = prs.slides.add_slide(prs.slide_layouts[5])
    s2.shapes.title.text = "Budget without pictures"
    prs.save(str(path))
    return path
