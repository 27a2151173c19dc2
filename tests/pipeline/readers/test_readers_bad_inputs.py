"""The bad-input corpus: every broken file fails with the right error class and code."""

from __future__ import annotations

import os
import random
import struct
import zipfile
from pathlib import Path

import pytest

from knowbase.errors import EncryptedFile, NoTextExtracted, UnreadableFile
from knowbase.pipeline.readers import SUPPORTED_EXTENSIONS, read_file
from knowbase.pipeline.readers.formats import TEXT_EXTENSIONS

pytestmark = pytest.mark.timeout(60)

_TEXT_EXTS = {".txt", ".md", ".markdown", ".mdx", ".csv", ".html", ".htm"} | TEXT_EXTENSIONS


@pytest.mark.parametrize("ext", sorted(SUPPORTED_EXTENSIONS))
def test_zero_byte_files(tmp_path: Path, ext: str) -> None:
    path = tmp_path / f"empty{ext}"
    path.write_bytes(b"")
    expected = NoTextExtracted if ext in _TEXT_EXTS else UnreadableFile
    with pytest.raises(expected) as info:
        read_file(path)
    assert info.value.code == expected.code
    assert info.value.details["path"] == str(path)


def test_whitespace_only_text_has_no_text(tmp_path: Path) -> None:
    path = tmp_path / "blank.md"
    path.write_text("\n\n   \n\t\n")
    with pytest.raises(NoTextExtracted):
        read_file(path)


def _pdf_bytes(tmp_path: Path) -> bytes:
    from reportlab.pdfgen import canvas

    src = tmp_path / "src.pdf"
    c = canvas.Canvas(str(src))
    for i in range(3):
        c.drawString(72, 720, f"page {i} " + "words " * 40)
        c.showPage()
    c.save()
    return src.read_bytes()


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
def test_truncated_pdf(tmp_path: Path, keep: float) -> None:
    data = _pdf_bytes(tmp_path)
    path = tmp_path / "cut.pdf"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(UnreadableFile) as info:
        read_file(path)
    assert info.value.details["reason"] == "truncated"


def test_pdf_with_garbage_body(tmp_path: Path) -> None:
    path = tmp_path / "junk.pdf"
    path.write_bytes(b"%PDF-1.7\n" + random.Random(1).randbytes(5000) + b"\n%%EOF\n")
    with pytest.raises((UnreadableFile, NoTextExtracted)):
        read_file(path)


@pytest.mark.parametrize("ext", [".docx", ".xls", ".xlsx", ".pptx", ".epub", ".pdf", ".doc"])
def test_random_bytes_with_a_binary_extension(tmp_path: Path, ext: str) -> None:
    path = tmp_path / f"garbage{ext}"
    path.write_bytes(random.Random(7).randbytes(4096))
    with pytest.raises(UnreadableFile) as info:
        read_file(path)
    assert info.value.details["reason"] == "signature_mismatch"


def test_text_named_xls_is_not_read_as_text(tmp_path: Path) -> None:
    path = tmp_path / "report.xls"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(UnreadableFile, match="signature"):
        read_file(path)


def test_pdf_named_txt_is_a_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(_pdf_bytes(tmp_path))
    with pytest.raises(UnreadableFile, match="PDF"):
        read_file(path)


def test_invalid_utf8_garbage_txt(tmp_path: Path) -> None:
    path = tmp_path / "garbage.txt"
    rng = random.Random(3)
    path.write_bytes(bytes(rng.randrange(128, 256) for _ in range(4000)))
    with pytest.raises(UnreadableFile) as info:
        read_file(path)
    assert info.value.details["reason"] == "not_text"


def test_binary_with_nuls_named_md(tmp_path: Path) -> None:
    path = tmp_path / "blob.md"
    path.write_bytes(os.urandom(2048) + b"\x00" * 100)
    with pytest.raises(UnreadableFile):
        read_file(path)


def _zip_bomb(path: Path, declared: int) -> None:
    """A tiny valid zip whose central directory claims ``declared`` uncompressed bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("[Content_Types].xml", "<Types/>")
        zf.writestr("xl/worksheets/sheet1.xml", "<worksheet/>")
    data = bytearray(path.read_bytes())
    # Patch the uncompressed size of every central directory entry (signature PK\1\2,
    # uncompressed size at offset 24) — what a bomb's reader sees before inflating.
    pos = data.find(b"PK\x01\x02")
    while pos != -1:
        struct.pack_into("<I", data, pos + 24, declared)
        pos = data.find(b"PK\x01\x02", pos + 4)
    path.write_bytes(bytes(data))


def test_zip_bomb_like_xlsx(tmp_path: Path) -> None:
    path = tmp_path / "bomb.xlsx"
    _zip_bomb(path, 0xFFFF_FF00)
    assert path.stat().st_size < 1000
    with pytest.raises(UnreadableFile) as info:
        read_file(path)
    assert info.value.details["reason"] == "zip_bomb"


def test_truncated_xlsx(tmp_path: Path) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    wb.active.append(["a", "b"])
    good = tmp_path / "good.xlsx"
    wb.save(str(good))
    path = tmp_path / "cut.xlsx"
    path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(UnreadableFile) as info:
        read_file(path)
    assert info.value.details["reason"] == "bad_zip"


def test_zip_that_is_not_a_docx(tmp_path: Path) -> None:
    path = tmp_path / "fake.docx"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("hello.txt", "not a word document")
    with pytest.raises(UnreadableFile):
        read_file(path)


def test_password_protected_ooxml_is_encrypted(tmp_path: Path) -> None:
    # Office writes a protected .xlsx as an OLE compound file with an EncryptedPackage stream.
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504
    entry = "EncryptedPackage".encode("utf-16-le")
    path = tmp_path / "locked.xlsx"
    path.write_bytes(ole + b"\x00" * 512 + entry + b"\x00" * 2048)
    with pytest.raises(EncryptedFile):
        read_file(path)


def test_legacy_ole_doc_without_converter_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    # Hide LibreOffice (installed in CI) behind a PATH without it, so this path always runs.
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    monkeypatch.setenv("PATH", str(empty_bin))
    assert shutil.which("soffice") is None and shutil.which("libreoffice") is None
    path = tmp_path / "old.doc"
    path.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 2000)
    with pytest.raises(UnreadableFile) as info:
        read_file(path)
    assert info.value.details["reason"] == "no_converter"
    assert "LibreOffice" in (info.value.hint or "")


def test_over_max_bytes(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_text("x" * 1000)
    with pytest.raises(UnreadableFile) as info:
        read_file(path, max_bytes=999)
    assert info.value.details["reason"] == "too_big"
    assert read_file(path, max_bytes=1000)[0].text == "x" * 1000


def test_missing_file_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFile):
        read_file(tmp_path / "gone.pdf")


def test_png_named_jpg_is_a_mismatch(tmp_path: Path) -> None:
    from PIL import Image

    path = tmp_path / "photo.jpg"
    Image.new("RGB", (8, 8)).save(path, format="PNG")
    with pytest.raises(UnreadableFile, match="PNG"):
        read_file(path)
