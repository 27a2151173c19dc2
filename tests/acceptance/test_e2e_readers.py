"""Issue 4 end to end through ``Knowledge``: real files in every format, and the bad-input corpus.

Files are built at test time (python-docx, python-pptx, openpyxl, ebooklib, reportlab) and added
to a BM25-only base; reading runs in the reader child pool, as in production. Search hits and
``list_item_chunks`` must carry each document's locator (DESIGN improvement 4).
"""

from __future__ import annotations

import random
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import load_settings

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def knowledge(tmp_path: Path) -> Iterator[Knowledge]:
    kb = Knowledge(load_settings(tmp_path / "home"))
    yield kb
    kb.close()


# --- builders ----------------------------------------------------------------------------------


def make_docx(path: Path) -> Path:
    import docx

    d = docx.Document()
    d.add_heading("Handbook", level=1)
    d.add_paragraph("Welcome aboard.")
    d.add_heading("Holidays", level=2)
    d.add_paragraph("Employees receive thirty vacation days per year.")
    d.save(str(path))
    return path


def make_pptx(path: Path) -> Path:
    from pptx import Presentation

    prs = Presentation()
    s1 = prs.slides.add_slide(prs.slide_layouts[1])
    s1.shapes.title.text = "Roadmap"
    s1.placeholders[1].text = "Ship the first release"
    s2 = prs.slides.add_slide(prs.slide_layouts[1])
    s2.shapes.title.text = "Budget"
    s2.placeholders[1].text = "Marketing spend doubles in autumn"
    prs.save(str(path))
    return path


def make_xlsx(path: Path) -> Path:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Inventory"
    ws.append(["Item", "Count"])
    ws.append(["Widgets", 12])
    wb.create_sheet("Suppliers").append(["Acme", "Gizmotron industries"])
    wb.save(str(path))
    return path


def make_epub(path: Path) -> Path:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("e2e")
    book.set_title("Tales")
    book.set_language("en")
    c1 = epub.EpubHtml(title="Dawn", file_name="c1.xhtml", lang="en")
    c1.content = "<h1>One</h1><p>A lighthouse keeper counted the waves.</p>"
    c2 = epub.EpubHtml(title="Dusk", file_name="c2.xhtml", lang="en")
    c2.content = "<h1>Two</h1><p>The caravan crossed the dunes at night.</p>"
    book.add_item(c1)
    book.add_item(c2)
    book.toc = (epub.Link("c1.xhtml", "Dawn", "c1"), epub.Link("c2.xhtml", "Dusk", "c2"))
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", c1, c2]
    epub.write_epub(str(path), book)
    return path


def make_pdf(path: Path, pages: list[str]) -> Path:
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path))
    for text in pages:
        c.drawString(72, 720, text)
        c.showPage()
    c.save()
    return path


def make_html(path: Path) -> Path:
    path.write_text(
        "<html><head><title>Recipes</title><script>var hidden = 'kumquat';</script></head>"
        "<body><h1>Recipes</h1><p>Start here.</p><h2>Soup</h2>"
        "<p>Simmer the lentils for forty minutes.</p></body></html>",
        encoding="utf-8",
    )
    return path


def make_csv(path: Path) -> Path:
    path.write_text("city,river\nBudapest,Danube\nCairo,Nile\n", encoding="utf-8")
    return path


def zip_bomb_xlsx(path: Path) -> Path:
    """A tiny valid zip whose central directory claims ~4 GiB of uncompressed content."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("[Content_Types].xml", "<Types/>")
        zf.writestr("xl/worksheets/sheet1.xml", "<worksheet/>")
    data = bytearray(path.read_bytes())
    pos = data.find(b"PK\x01\x02")
    while pos != -1:
        struct.pack_into("<I", data, pos + 24, 0xFFFF_FF00)
        pos = data.find(b"PK\x01\x02", pos + 4)
    path.write_bytes(bytes(data))
    return path


# --- formats -----------------------------------------------------------------------------------

# file name, query, expected locator of the top hit
CASES = [
    ("handbook.docx", "vacation days", {"heading": ["Handbook", "Holidays"]}),
    ("deck.pptx", "marketing autumn", {"slide": 2}),
    ("stock.xlsx", "gizmotron", {"sheet": "Suppliers"}),
    ("stock.xlsx", "widgets", {"sheet": "Inventory"}),
    ("rivers.csv", "danube", {}),
    ("tales.epub", "caravan dunes", {"chapter": "Dusk"}),
    ("tales.epub", "lighthouse", {"chapter": "Dawn"}),
    ("recipes.html", "lentils simmer", {"heading": ["Recipes", "Soup"]}),
    ("report.pdf", "quokka", {"page": 1}),
    ("report.pdf", "pangolin", {"page": 2}),
    ("report.pdf", "wombat", {"page": 3}),
]


def test_every_format_is_indexed_with_locators(knowledge: Knowledge, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    files = [
        make_docx(src / "handbook.docx"),
        make_pptx(src / "deck.pptx"),
        make_xlsx(src / "stock.xlsx"),
        make_csv(src / "rivers.csv"),
        make_epub(src / "tales.epub"),
        make_html(src / "recipes.html"),
        make_pdf(
            src / "report.pdf",
            [
                "The quokka smiles on page one.",
                "A pangolin rolls up on page two.",
                "The wombat digs on page three.",
            ],
        ),
    ]
    # A processor would send the PDF to OCR; this test is about the readers alone.
    base = knowledge.create_base("formats", file_processor_id=None)
    result = knowledge.add(base.id, [AddInput.file(f) for f in files], wait=True, timeout_s=90)
    items = {i.concept_id: knowledge.get_item(base.id, i.id) for i in result.items}
    assert {c: (i.status, i.error_code) for c, i in items.items()} == {
        f.name: ("completed", None) for f in files
    }

    for name, query, locator in CASES:
        hits = knowledge.search(base.id, query).results
        assert hits, query
        assert (hits[0].concept_id, hits[0].locator) == (name, locator), query
        assert query.split()[0] in hits[0].text.lower()
        # The hit's text is the exact slice of the item's content its offsets name.
        chunks = knowledge.list_item_chunks(base.id, hits[0].item_id)
        (unit,) = [u for u in chunks if u.unit_id == hits[0].chunk_id]
        assert (unit.locator, unit.text) == (locator, hits[0].text)

    assert knowledge.search(base.id, "kumquat").results == []  # scripts are dropped
    pdf_chunks = knowledge.list_item_chunks(base.id, items["report.pdf"].id)
    assert [u.locator for u in pdf_chunks] == [{"page": 1}, {"page": 2}, {"page": 3}]
    deck = knowledge.list_item_chunks(base.id, items["deck.pptx"].id)
    assert [u.locator for u in deck] == [{"slide": 1}, {"slide": 2}]
    book = knowledge.list_item_chunks(base.id, items["stock.xlsx"].id)
    assert [u.locator for u in book] == [{"sheet": "Inventory"}, {"sheet": "Suppliers"}]


# --- the bad-input corpus ----------------------------------------------------------------------


def locked_pdf(path: Path, tmp: Path) -> Path:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    writer.append(PdfReader(str(make_pdf(tmp / "plain.pdf", ["Top secret plans"]))))
    writer.encrypt(user_password="hunter2", owner_password="owner", algorithm="AES-128")
    with path.open("wb") as fh:
        writer.write(fh)
    return path


def build_corpus(root: Path, tmp: Path) -> dict[str, str | None]:
    """A folder of broken files plus two good ones: file name → expected error code."""
    root.mkdir(parents=True)
    (root / "empty.txt").write_bytes(b"")
    (root / "empty.pdf").write_bytes(b"")
    (root / "empty.docx").write_bytes(b"")
    whole = make_pdf(tmp / "whole.pdf", ["page " + "words " * 40] * 3).read_bytes()
    (root / "truncated.pdf").write_bytes(whole[: len(whole) // 2])
    (root / "random.docx").write_bytes(random.Random(7).randbytes(4096))
    rng = random.Random(3)
    (root / "garbage.txt").write_bytes(bytes(rng.randrange(128, 256) for _ in range(4000)))
    zip_bomb_xlsx(root / "bomb.xlsx")
    locked_pdf(root / "locked.pdf", tmp)
    (root / "good.md").write_text("# Good\n\nThe heron waits by the pond.\n", encoding="utf-8")
    make_csv(root / "good.csv")
    return {
        "empty.txt": "no_text_extracted",
        "empty.pdf": "unreadable_file",
        "empty.docx": "unreadable_file",
        "truncated.pdf": "unreadable_file",
        "random.docx": "unreadable_file",
        "garbage.txt": "unreadable_file",
        "bomb.xlsx": "unreadable_file",
        "locked.pdf": "encrypted_file",
        "good.md": None,
        "good.csv": None,
    }


def test_bad_input_corpus_fails_each_file_alone(knowledge: Knowledge, tmp_path: Path) -> None:
    expected = build_corpus(tmp_path / "src" / "corpus", tmp_path)
    base = knowledge.create_base("corpus", file_processor_id=None)
    result = knowledge.add(
        base.id, [AddInput.directory(tmp_path / "src" / "corpus")], wait=True, timeout_s=90
    )
    root = knowledge.get_item(base.id, result.items[0].id)
    leaves = {
        i.concept_id.removeprefix("corpus/"): i
        for i in knowledge.list_items(base.id)
        if i.type == "file"
    }
    assert {n: i.error_code for n, i in leaves.items()} == expected
    for name, item in leaves.items():
        assert item.status == ("completed" if expected[name] is None else "failed"), name
        assert bool(item.error_message) == (expected[name] is not None), name
    assert "zip" in (leaves["bomb.xlsx"].error_message or "").lower()
    assert leaves["locked.pdf"].error_message.endswith("remove the password and add the file again")
    assert (root.status, root.error_code) == ("failed", "child_failed")
    (hit,) = knowledge.search(base.id, "heron pond").results
    assert hit.concept_id == "corpus/good.md" and hit.locator == {"heading": ["Good"]}
    (hit,) = knowledge.search(base.id, "danube").results
    assert hit.concept_id == "corpus/good.csv"

    # kb retry re-runs the failed folder from raw/: the same files fail the same way, and the
    # good ones stay searchable.
    knowledge.retry_failed(base.id, wait=True)
    again = {
        i.concept_id.removeprefix("corpus/"): i.error_code
        for i in knowledge.list_items(base.id)
        if i.type == "file"
    }
    assert again == expected
    assert [h.concept_id for h in knowledge.search(base.id, "heron").results] == ["corpus/good.md"]


def test_bad_files_added_one_by_one_fail_alone_in_one_batch(
    knowledge: Knowledge, tmp_path: Path
) -> None:
    corpus = tmp_path / "src" / "corpus"
    expected = build_corpus(corpus, tmp_path)
    base = knowledge.create_base("batch", file_processor_id=None)
    inputs = [AddInput.file(corpus / name) for name in sorted(expected)]
    result = knowledge.add(base.id, inputs, wait=True, timeout_s=90)
    got = {i.concept_id: knowledge.get_item(base.id, i.id).error_code for i in result.items}
    assert got == expected
    assert knowledge.counts(base.id) == {"completed": 2, "failed": 8}
