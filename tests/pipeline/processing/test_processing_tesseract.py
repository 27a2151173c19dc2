"""The tesseract processor on real images and PDFs; cancel and timeout kill the tool."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from knowbase.errors import IndexingInterrupted, InvalidInput, NoTextExtracted, UnreadableFile
from knowbase.pipeline.processing import (
    Processor,
    TesseractProcessor,
    get_processor,
)
from knowbase.pipeline.processing.subprocess_run import run_tool
from knowbase.pipeline.readers import read_file

pytestmark = pytest.mark.timeout(120)

needs_tesseract = pytest.mark.needs_system("tesseract", "pdftoppm")  # tests/_system_tools.py


def text_image(path: Path, lines: list[str], *, fmt: str | None = None) -> Path:
    """Large, clear black-on-white text (Pillow's bundled font, no system fonts needed)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=64)
    img = Image.new("L", (1400, 130 + 110 * len(lines)), 255)
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((60, 60 + 110 * i), line, fill=0, font=font)
    img.save(path, format=fmt)
    return path


def scanned_pdf(path: Path, tmp: Path, pages: list[str | None]) -> Path:
    """A PDF whose ``None`` entries are real text pages and strings are image-only pages."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    for n, content in enumerate(pages, start=1):
        if content is None:
            c.drawString(72, 760, f"Text layer page {n}")
        else:
            img = text_image(tmp / f"scan{n}.png", [content])
            c.drawImage(str(img), 40, 600, width=520, height=520 * 240 / 1400)
        c.showPage()
    c.save()
    return path


def test_get_processor() -> None:
    assert get_processor(None) is None
    proc = get_processor("tesseract")
    assert isinstance(proc, TesseractProcessor) and isinstance(proc, Processor)
    assert proc.name == "tesseract"
    with pytest.raises(InvalidInput):
        get_processor("abbyy")


@needs_tesseract
def test_png_text_is_found(tmp_path: Path) -> None:
    raw = text_image(tmp_path / "hello.png", ["Hello OCR 2026"])
    out = tmp_path / "hello.md"
    result = TesseractProcessor().process(raw, out, timeout_s=60)
    assert result.output == out and result.pages == 1 and result.ocr_pages == (1,)
    (doc,) = read_file(out)
    assert "Hello OCR 2026" in doc.text
    assert doc.locator == {}


@needs_tesseract
def test_scanned_pdf_pages_are_ocred_with_page_locators(tmp_path: Path) -> None:
    raw = scanned_pdf(tmp_path / "scan.pdf", tmp_path, [None, "Invoice number 4711", None])
    out = tmp_path / "scan.md"
    result = TesseractProcessor().process(raw, out, timeout_s=90)
    assert result.pages == 3
    assert result.text_layer_pages == (1, 3) and result.ocr_pages == (2,)
    docs = read_file(out)
    assert [d.locator for d in docs] == [{"page": 1}, {"page": 2}, {"page": 3}]
    assert docs[0].text == "Text layer page 1"
    assert "Invoice number 4711" in docs[1].text
    assert docs[2].text == "Text layer page 3"


@needs_tesseract
def test_multipage_tiff_gets_page_headings(tmp_path: Path) -> None:
    from PIL import Image

    a = Image.open(text_image(tmp_path / "a.png", ["First frame"]))
    b = Image.open(text_image(tmp_path / "b.png", ["Second frame"]))
    raw = tmp_path / "pages.tiff"
    a.save(raw, save_all=True, append_images=[b])
    out = tmp_path / "pages.md"
    TesseractProcessor().process(raw, out, timeout_s=60)
    docs = read_file(out)
    assert [d.locator for d in docs] == [{"page": 1}, {"page": 2}]
    assert "First frame" in docs[0].text and "Second frame" in docs[1].text


@needs_tesseract
def test_blank_image_has_no_text_and_writes_nothing(tmp_path: Path) -> None:
    from PIL import Image

    raw = tmp_path / "blank.jpg"
    Image.new("L", (300, 200), 255).save(raw, format="JPEG")
    out = tmp_path / "blank.md"
    with pytest.raises(NoTextExtracted):
        TesseractProcessor().process(raw, out, timeout_s=60)
    assert not out.exists()


@needs_tesseract
def test_wrong_signature_is_unreadable(tmp_path: Path) -> None:
    raw = tmp_path / "fake.png"
    raw.write_bytes(b"not an image at all")
    with pytest.raises(UnreadableFile):
        TesseractProcessor().process(raw, tmp_path / "fake.md", timeout_s=30)


@needs_tesseract
def test_cancel_kills_the_process(tmp_path: Path) -> None:
    # Ten scanned pages: far longer than the moment we cancel.
    raw = scanned_pdf(tmp_path / "long.pdf", tmp_path, [f"Page text {n}" for n in range(10)])
    out = tmp_path / "long.md"
    cancel = threading.Event()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            TesseractProcessor().process(raw, out, cancel=cancel, timeout_s=300)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    deadline = time.monotonic() + 30
    while not _tool_running() and time.monotonic() < deadline:
        time.sleep(0.02)  # poll for the child to appear
    assert _tool_running(), "pdftoppm/tesseract never started"
    started = time.monotonic()
    cancel.set()
    thread.join(20)
    assert not thread.is_alive()
    assert time.monotonic() - started < 5
    assert len(errors) == 1 and isinstance(errors[0], IndexingInterrupted)
    assert not out.exists()
    assert not _tool_running()


def _tool_running() -> bool:
    import os

    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            comm = stat.read_text().split("(", 1)[1].rsplit(")", 1)[0]
        except (OSError, IndexError):
            continue
        if comm in ("tesseract", "pdftoppm") and fields[1] == me and fields[0] != "Z":
            return True
    return False


def test_run_tool_timeout_kills_the_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "survived"
    # The shell's child sleeps then writes the marker; killing only the shell would leave it.
    cmd = ["sh", "-c", f"(sleep 1; touch {marker}) & wait"]
    started = time.monotonic()
    with pytest.raises(UnreadableFile) as info:
        run_tool(cmd, cancel=None, deadline=time.monotonic() + 0.3)
    assert info.value.details["reason"] == "timeout"
    assert time.monotonic() - started < 2
    time.sleep(1.3)  # the grandchild would have written by now had it survived
    assert not marker.exists()


def test_run_tool_cancel_and_failure(tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(IndexingInterrupted):
        run_tool(["sleep", "5"], cancel=cancel, deadline=time.monotonic() + 60)
    with pytest.raises(UnreadableFile, match="exit 3"):
        run_tool(["sh", "-c", "echo boom >&2; exit 3"], cancel=None, deadline=time.monotonic() + 9)
