"""Issue 4 end to end through ``Knowledge``: scanned PDFs and images, with and without OCR.

A base without a file processor fails an image-only PDF ``no_text_extracted`` and says how to
fix it; a base with ``file_processor_id="tesseract"`` runs the process-file job (tesseract in a
child process), indexes the ``<stem>.md`` artifact, and cites pages.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import load_settings

pytestmark = pytest.mark.timeout(120)

needs_tesseract = pytest.mark.needs_system("tesseract", "pdftoppm")  # tests/_system_tools.py


@pytest.fixture
def knowledge(tmp_path: Path) -> Iterator[Knowledge]:
    kb = Knowledge(load_settings(tmp_path / "home"))
    yield kb
    kb.close()


@pytest.fixture
def src(tmp_path: Path) -> Path:
    path = tmp_path / "src"
    path.mkdir()
    return path


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


def pdf(path: Path, pages: list[tuple[str, str]]) -> Path:
    """One page per ``(kind, text)``: ``"text"`` draws a text layer, ``"scan"`` only an image."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    for n, (kind, text) in enumerate(pages, start=1):
        if kind == "text":
            c.drawString(72, 760, text)
        else:
            img = text_image(path.parent / f".{path.stem}-{n}.png", [text])
            c.drawImage(str(img), 40, 600, width=520, height=520 * 240 / 1400)
            img.unlink()
        c.showPage()
    c.save()
    return path


def test_scanned_pdf_without_processor_fails_and_suggests_ocr(
    knowledge: Knowledge, src: Path
) -> None:
    base = knowledge.create_base("plain", file_processor_id=None)
    scan = pdf(src / "scan.pdf", [("scan", "Invoice 4711 overdue")])
    item = knowledge.add(base.id, [AddInput.file(scan)], wait=True, timeout_s=30).items[0]
    item = knowledge.get_item(base.id, item.id)
    assert (item.status, item.error_code) == ("failed", "no_text_extracted")
    assert item.concept_id == "scan.pdf"  # no artifact slot without a processor
    assert item.error_message == (
        "scan.pdf contains no text: enable OCR for this base (file processor 'tesseract') "
        "and reindex"
    )


def test_image_without_processor_fails_no_text_extracted(knowledge: Knowledge, src: Path) -> None:
    base = knowledge.create_base("plain", file_processor_id=None)
    png = text_image(src / "note.png", ["Hello"])
    item = knowledge.add(base.id, [AddInput.file(png)], wait=True, timeout_s=30).items[0]
    item = knowledge.get_item(base.id, item.id)
    assert (item.status, item.error_code) == ("failed", "no_text_extracted")
    assert "OCR" in (item.error_message or ""), item.error_message


@needs_tesseract
def test_scanned_pdf_with_tesseract_is_searchable_with_pages(
    knowledge: Knowledge, src: Path
) -> None:
    base = knowledge.create_base("ocr", file_processor_id="tesseract")
    scan = pdf(
        src / "scan.pdf",
        [("text", "Cover page about the harbour"), ("scan", "Invoice 4711 overdue")],
    )
    item = knowledge.add(base.id, [AddInput.file(scan)], wait=True, timeout_s=90).items[0]
    assert (item.data["relative_path"], item.concept_id) == ("scan.pdf", "scan.pdf")
    item = knowledge.get_item(base.id, item.id)
    assert (item.status, item.error_code) == ("completed", None)
    assert item.concept_id == "scan.md"  # the artifact is the Concept ID
    raw = knowledge.rt.storage(base.id)
    assert raw.exists("scan.pdf") and raw.exists("scan.md")

    (hit,) = knowledge.search(base.id, "invoice overdue").results
    assert (hit.item_id, hit.concept_id, hit.locator) == (item.id, "scan.md", {"page": 2})
    assert "4711" in hit.text
    (hit,) = knowledge.search(base.id, "harbour").results
    assert hit.locator == {"page": 1}
    chunks = knowledge.list_item_chunks(base.id, item.id)
    assert [u.locator for u in chunks] == [{"page": 1}, {"page": 2}]


@needs_tesseract
def test_png_with_tesseract_is_searchable(knowledge: Knowledge, src: Path) -> None:
    base = knowledge.create_base("ocr", file_processor_id="tesseract")
    png = text_image(src / "whiteboard.png", ["Quarterly kickoff", "Budget approved"])
    item = knowledge.add(base.id, [AddInput.file(png)], wait=True, timeout_s=60).items[0]
    item = knowledge.get_item(base.id, item.id)
    assert (item.status, item.concept_id) == ("completed", "whiteboard.md")
    (hit,) = knowledge.search(base.id, "kickoff budget").results
    assert hit.concept_id == "whiteboard.md"
    assert "Budget approved" in hit.text


@needs_tesseract
def test_pdf_beside_an_existing_md_gets_the_next_name(knowledge: Knowledge, src: Path) -> None:
    base = knowledge.create_base("ocr", file_processor_id="tesseract")
    md = src / "x.md"
    md.write_text("# X\n\nThe original markdown about ferns.\n", encoding="utf-8")
    first = knowledge.add(base.id, [AddInput.file(md)], wait=True, timeout_s=30).items[0]
    x_pdf = pdf(src / "x.pdf", [("text", "A text layer about mosses")])
    second = knowledge.add(base.id, [AddInput.file(x_pdf)], wait=True, timeout_s=60).items[0]
    assert second.data["relative_path"] == "x_1.pdf"
    second = knowledge.get_item(base.id, second.id)
    assert (second.status, second.concept_id) == ("completed", "x_1.md")
    assert knowledge.get_item(base.id, first.id).concept_id == "x.md"
    storage = knowledge.rt.storage(base.id)
    assert "ferns" in storage.path_of("x.md").read_text(encoding="utf-8")
    assert [h.concept_id for h in knowledge.search(base.id, "ferns").results] == ["x.md"]
    (hit,) = knowledge.search(base.id, "mosses").results
    assert (hit.concept_id, hit.locator) == ("x_1.md", {"page": 1})


@needs_tesseract
def test_folder_with_pdf_and_same_stem_md_keeps_both(knowledge: Knowledge, src: Path) -> None:
    """A folder holding ``a.pdf`` and ``a.md``: the PDF's artifact must not overwrite ``a.md``."""
    base = knowledge.create_base("ocr", file_processor_id="tesseract")
    folder = src / "papers"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nHand-written notes about lichens.\n", encoding="utf-8")
    pdf(folder / "a.pdf", [("text", "The printed paper about liverworts")])
    root = knowledge.add(base.id, [AddInput.directory(folder)], wait=True, timeout_s=60).items[0]
    root = knowledge.get_item(base.id, root.id)
    leaves = [i for i in knowledge.list_items(base.id) if i.type == "file"]
    assert root.status == "completed", [(i.concept_id, i.error_code) for i in leaves]
    # As with a single add, the PDF moves aside (a_1.pdf) so its artifact gets a free slot.
    assert sorted((i.relative_path, i.concept_id) for i in leaves) == [
        ("papers/a.md", "papers/a.md"),
        ("papers/a_1.pdf", "papers/a_1.md"),
    ]
    storage = knowledge.rt.storage(base.id)
    assert "lichens" in storage.path_of("papers/a.md").read_text(encoding="utf-8")
    assert [h.concept_id for h in knowledge.search(base.id, "lichens").results] == ["papers/a.md"]
    (hit,) = knowledge.search(base.id, "liverworts").results
    assert (hit.concept_id, hit.locator) == ("papers/a_1.md", {"page": 1})


@needs_tesseract
def test_reindex_of_a_changed_scan_runs_ocr_again(knowledge: Knowledge, src: Path) -> None:
    base = knowledge.create_base("ocr", file_processor_id="tesseract")
    scan = pdf(src / "memo.pdf", [("scan", "Meeting moved to Monday")])
    item = knowledge.add(base.id, [AddInput.file(scan)], wait=True, timeout_s=60).items[0]
    assert knowledge.get_item(base.id, item.id).status == "completed"
    assert knowledge.search(base.id, "monday").results

    pdf(scan, [("scan", "Meeting moved to Friday")])  # the origin changes
    knowledge.reindex_items(base.id, [item.id], wait=True)
    item = knowledge.get_item(base.id, item.id)
    assert (item.status, item.concept_id) == ("completed", "memo.md")
    assert knowledge.search(base.id, "monday").results == []
    (hit,) = knowledge.search(base.id, "friday").results
    assert hit.concept_id == "memo.md" and hit.locator == {"page": 1}


def locked_pdf(path: Path, tmp: Path) -> Path:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    writer.append(PdfReader(str(pdf(tmp / "plain.pdf", [("text", "Top secret plans")]))))
    writer.encrypt(user_password="hunter2", owner_password="owner", algorithm="AES-128")
    with path.open("wb") as fh:
        writer.write(fh)
    return path


@needs_tesseract
def test_broken_pdfs_fail_alone_in_an_ocr_base(
    knowledge: Knowledge, src: Path, tmp_path: Path
) -> None:
    """The process-file job fails a bad PDF with the same codes the readers use."""
    import random

    base = knowledge.create_base("ocr", file_processor_id="tesseract")
    folder = src / "inbox"
    folder.mkdir()
    (folder / "garbage.pdf").write_bytes(random.Random(5).randbytes(3000))
    locked_pdf(folder / "locked.pdf", tmp_path)
    whole = pdf(tmp_path / "whole.pdf", [("text", "page " + "words " * 40)] * 3).read_bytes()
    (folder / "cut.pdf").write_bytes(whole[: len(whole) // 2])
    (folder / "ok.md").write_text("Gannets dive for fish.\n", encoding="utf-8")
    root = knowledge.add(base.id, [AddInput.directory(folder)], wait=True, timeout_s=60).items[0]
    leaves = {i.relative_path: i for i in knowledge.list_items(base.id) if i.type == "file"}
    assert {r: (i.status, i.error_code) for r, i in leaves.items()} == {
        "inbox/garbage.pdf": ("failed", "unreadable_file"),
        "inbox/locked.pdf": ("failed", "encrypted_file"),
        "inbox/cut.pdf": ("failed", "unreadable_file"),
        "inbox/ok.md": ("completed", None),
    }
    assert "password" in (leaves["inbox/locked.pdf"].error_message or "")
    storage = knowledge.rt.storage(base.id)
    assert not any(storage.exists(f"inbox/{s}.md") for s in ("garbage", "locked", "cut"))
    assert knowledge.get_item(base.id, root.id).error_code == "child_failed"
    (hit,) = knowledge.search(base.id, "gannets").results
    assert hit.concept_id == "inbox/ok.md"
