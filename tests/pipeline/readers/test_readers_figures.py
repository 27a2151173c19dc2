"""Figures of PDF, DOCX and PPTX files read in place, for the caption processor (issue 28)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from figure_files import BLUE, GREEN, RED, make_docx, make_pdf, make_pptx
from knowbase.pipeline.documents import Document
from knowbase.pipeline.readers.figures import MIN_SIDE, Figure, read_with_figures
from knowbase.pipeline.readers.markdown import (
    PROCESSED_MARKER,
    escape_page_headings,
    locator_line,
    read_processed_markdown,
)
from vision_server import colour_image


def _rgb(fig: Figure) -> tuple[int, int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(fig.data)) as img:
        return img.convert("RGB").resize((1, 1)).getpixel((0, 0))


def _near(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return all(abs(x - y) < 12 for x, y in zip(a, b, strict=True))


def _shape(parts: list) -> list[tuple[str, dict]]:
    return [("fig" if isinstance(p, Figure) else "doc", p.locator) for p in parts]


def test_pdf_figures_follow_their_page_text(tmp_path: Path) -> None:
    parts = read_with_figures(make_pdf(tmp_path / "r.pdf", tmp_path))
    assert _shape(parts) == [
        ("doc", {"page": 1}),
        ("fig", {"page": 1, "figure": 1}),  # the 10 px square is an icon, skipped
        ("doc", {"page": 2}),
        ("fig", {"page": 3, "figure": 2}),
    ]
    assert "Rainfall in Lisbon" in parts[0].text
    assert _near(_rgb(parts[1]), RED) and _near(_rgb(parts[3]), BLUE)
    assert all(p.mime == "image/png" for p in parts if isinstance(p, Figure))


def test_docx_figures_sit_where_the_picture_is(tmp_path: Path) -> None:
    parts = read_with_figures(make_docx(tmp_path / "r.docx", tmp_path))
    results, turbines = {"heading": ["Results"]}, {"heading": ["Turbines"]}
    assert _shape(parts) == [
        ("doc", results),
        ("fig", {**results, "figure": 1}),
        ("doc", results),
        ("doc", turbines),
        ("fig", {**turbines, "figure": 2}),
    ]
    assert parts[0].text.startswith("# Results") and "introduction" in parts[0].text
    assert "discussion" in parts[2].text and "@@" not in parts[2].text
    assert _near(_rgb(parts[1]), RED) and _near(_rgb(parts[4]), BLUE)


def test_pptx_figures_follow_their_slide_including_groups(tmp_path: Path) -> None:
    parts = read_with_figures(make_pptx(tmp_path / "d.pptx", tmp_path))
    assert _shape(parts) == [
        ("doc", {"slide": 1}),
        ("fig", {"slide": 1, "figure": 1}),
        ("doc", {"slide": 2}),
    ]
    assert _near(_rgb(parts[1]), GREEN)


def test_an_image_file_is_one_figure_of_any_size(tmp_path: Path) -> None:
    from PIL import Image

    tiny = tmp_path / "dot.tif"
    Image.new("RGB", (MIN_SIDE // 2, MIN_SIDE // 2), BLUE).save(tiny)
    [fig] = read_with_figures(tiny)
    assert fig.locator == {} and fig.mime == "image/png"  # TIFF is sent as PNG
    png = tmp_path / "a.png"
    png.write_bytes(colour_image(RED))
    assert read_with_figures(png)[0].data == png.read_bytes()  # sent as it is


def test_processed_markdown_keeps_whole_locators(tmp_path: Path) -> None:
    docs = [
        Document("# Results\nIntro text", {"heading": ["Results"]}),
        Document("Figure 1: a chart", {"heading": ["Results"], "figure": 1}),
        Document("## Page 9\n" + locator_line({"page": 99}), {"page": 2}),
    ]
    text = (
        PROCESSED_MARKER
        + "\n\n"
        + "\n\n".join(f"{locator_line(d.locator)}\n{escape_page_headings(d.text)}" for d in docs)
    )
    back = read_processed_markdown(text)
    assert [d.locator for d in back] == [d.locator for d in docs]
    assert back[0].text == docs[0].text and back[1].text == docs[1].text
    assert back[2].text.startswith("\\## Page 9\n\\<!--")  # escaped, so still page 2's text


@pytest.mark.parametrize("make", [make_pdf, make_docx, make_pptx])
def test_the_text_is_what_the_plain_reader_gives(make, tmp_path: Path) -> None:
    from knowbase.pipeline.readers import read_file

    path = make(tmp_path / f"f.{make.__name__[5:]}", tmp_path)
    text = "\n".join(p.text for p in read_with_figures(path) if not isinstance(p, Figure))
    plain = "\n".join(d.text for d in read_file(path))
    assert text.split() == plain.split()
