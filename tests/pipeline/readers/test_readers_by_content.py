"""Issue 41 item 4: every text file is read, whatever its name; binaries are still refused."""

from __future__ import annotations

import bz2
import gzip
import lzma
from pathlib import Path

import pytest

from knowbase.errors import FileTooLarge, UnsupportedFileType
from knowbase.pipeline.readers import is_readable, read_file
from knowbase.pipeline.readers.content import text_verdict

pytestmark = pytest.mark.timeout(60)

GPL = "GNU GENERAL PUBLIC LICENSE\n   Version 3, 29 June 2007\n\nEveryone is permitted…\n"


@pytest.mark.parametrize("name", ["GPL-3", "README.Debian", "libfoo.copyright", "notes.weird"])
def test_text_of_any_name_is_read(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(GPL, encoding="utf-8")
    assert is_readable(path)
    assert read_file(path)[0].text == GPL


@pytest.mark.parametrize(
    ("name", "pack"),
    [("changelog.Debian.gz", gzip.compress), ("NEWS.bz2", bz2.compress), ("log.xz", lzma.compress)],
)
def test_compressed_text_is_read_decompressed(tmp_path: Path, name: str, pack: object) -> None:
    path = tmp_path / name
    path.write_bytes(pack(GPL.encode("utf-8")))  # type: ignore[operator]
    assert is_readable(path)
    assert read_file(path)[0].text == GPL


def test_binary_without_extension_is_refused_with_its_reason(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(b"data\x02\x01\x01\x00" + bytes(range(256)) * 4)
    assert not is_readable(path)
    with pytest.raises(UnsupportedFileType) as info:
        read_file(path)
    assert "content is not text" in info.value.message
    assert info.value.details["reason"] == "contains NUL bytes"


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("tool", b"\x7fELF"),
        ("x.exe", b"MZ"),
        ("lib.so", b"plain words"),
        ("A.class", b"\xca\xfe\xba\xbe"),
    ],
)
def test_programs_are_never_text_however_short(tmp_path: Path, name: str, data: bytes) -> None:
    # a 2-byte "MZ" decodes as text; its name (or an executable's signature) says otherwise
    path = tmp_path / name
    path.write_bytes(data)
    assert not is_readable(path)
    with pytest.raises(UnsupportedFileType) as info:
        read_file(path)
    assert info.value.details["reason"].startswith("is a program")


def test_a_png_under_an_odd_name_is_not_text(tmp_path: Path) -> None:
    path = tmp_path / "picture.dat"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"abc" * 10)
    assert text_verdict(path) == "is a PNG file"


def test_compressed_binary_and_tar_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "docs.tar.gz"
    path.write_bytes(gzip.compress(b"docs/a.txt" + bytes(502)))
    assert not is_readable(path)
    assert "holds a file that" in (text_verdict(path) or "")


def test_a_decompression_bomb_is_too_large(tmp_path: Path) -> None:
    path = tmp_path / "bomb.txt.gz"
    path.write_bytes(gzip.compress(b"a" * (8 * 1024 * 1024)))  # ~8 KB on disk, ratio ~1000
    with pytest.raises(FileTooLarge) as info:
        read_file(path)
    assert info.value.code == "too_large"
    assert "decompression bomb" in info.value.message


def test_as_text_forces_text_reading(tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    path.write_text("a,b\n1,2\n", encoding="utf-8")
    assert read_file(path)[0].text.startswith("| a | b |")
    assert read_file(path, as_text=True)[0].text == "a,b\n1,2\n"
    odd = tmp_path / "records.bin"
    odd.write_bytes(b"name=x\nvalue=\x01\n")
    assert read_file(odd, as_text=True)[0].text.startswith("name=x")


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_without_bom_is_detected(tmp_path: Path, encoding: str) -> None:
    text = "Prénom;Nom\nÉlodie;Durand\n" * 20
    path = tmp_path / "people.txt"
    path.write_bytes(text.encode(encoding))
    assert read_file(path)[0].text == text


def test_terminal_output_with_colour_codes_is_text(tmp_path: Path) -> None:
    # man-db's manual is shipped as text with ANSI escapes: 2.4% of its first 8 KiB are ESC.
    path = tmp_path / "manual.txt.gz"
    line = "\x1b[1mman-db\x1b[0m - the \x1b[4mdatabase\x1b[24m cached manual pager suite\n"
    path.write_bytes(gzip.compress((line * 200).encode("ascii")))
    assert is_readable(path)
    assert "cached manual pager" in read_file(path)[0].text
