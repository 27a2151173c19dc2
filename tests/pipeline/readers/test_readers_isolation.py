"""read_file_isolated: results and errors cross the process boundary; caps kill the child."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from knowbase.errors import EncryptedFile, NoTextExtracted, UnreadableFile
from knowbase.pipeline.documents import Document
from knowbase.pipeline.readers import isolation, read_file_isolated
from knowbase.pipeline.readers.isolation import ReaderPool, pdf_page_texts_isolated

pytestmark = pytest.mark.timeout(120)


def test_documents_come_back(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_text("# T\n\nhello\n")
    assert read_file_isolated(path) == [Document("# T\n\nhello", {"heading": ["T"]})]


def test_error_class_message_hint_and_details_travel(tmp_path: Path) -> None:
    path = tmp_path / "empty.txt"
    path.write_text("   ")
    with pytest.raises(NoTextExtracted) as info:
        read_file_isolated(path)
    assert info.value.hint == "the file has no readable text"
    assert info.value.details == {"path": str(path.resolve())}

    big = tmp_path / "big.txt"
    big.write_text("x" * 100)
    with pytest.raises(UnreadableFile) as info2:
        read_file_isolated(big, max_bytes=10)
    assert info2.value.details["reason"] == "too_big" and "100 bytes" in info2.value.message


def test_encrypted_pdf_in_child(tmp_path: Path) -> None:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(100, 100)
    writer.encrypt(user_password="pw", algorithm="AES-256")
    path = tmp_path / "locked.pdf"
    with path.open("wb") as fh:
        writer.write(fh)
    with pytest.raises(EncryptedFile):
        read_file_isolated(path)


def test_time_cap_kills_the_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "slow.txt"
    path.write_text("never read")
    pool = ReaderPool(size=1)
    try:
        pool.call("read_file", str(path), None, timeout_s=30, memory_mb=1024)  # warm one child
        (child,) = pool._idle
        monkeypatch.setenv("KNOWBASE_TEST_READER_DELAY_S", "30")
        started = time.monotonic()
        with pytest.raises(UnreadableFile) as info:
            pool.call("read_file", str(path), None, timeout_s=0.5, memory_mb=1024)
        assert time.monotonic() - started < 10
        assert info.value.details["reason"] == "timeout"
        assert child.proc.poll() is not None  # killed, not left sleeping
        assert pool._idle == []
        monkeypatch.delenv("KNOWBASE_TEST_READER_DELAY_S")
        assert pool.call("read_file", str(path), None, timeout_s=30, memory_mb=1024)
    finally:
        pool.close()


def test_memory_cap_fails_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "fat.txt"
    path.write_text("text")
    monkeypatch.setenv("KNOWBASE_TEST_READER_ALLOC_MB", "2048")
    with pytest.raises(UnreadableFile) as info:
        read_file_isolated(path, memory_mb=512)
    assert info.value.details["reason"] == "memory_cap"
    monkeypatch.delenv("KNOWBASE_TEST_READER_ALLOC_MB")
    assert read_file_isolated(path, memory_mb=512)[0].text == "text"


def test_pdf_page_texts_isolated(tmp_path: Path) -> None:
    from reportlab.pdfgen import canvas

    path = tmp_path / "two.pdf"
    c = canvas.Canvas(str(path))
    c.drawString(72, 720, "first")
    c.showPage()
    c.showPage()
    c.save()
    assert pdf_page_texts_isolated(path) == ["first", ""]


def test_children_are_reused(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("a")
    pool = ReaderPool(size=1)
    try:
        pool.call("read_file", str(path), None, timeout_s=30, memory_mb=1024)
        first = pool._idle[0].proc.pid
        started = time.monotonic()
        for _ in range(5):
            pool.call("read_file", str(path), None, timeout_s=30, memory_mb=1024)
        assert pool._idle[0].proc.pid == first
        assert time.monotonic() - started < 2  # warm calls, no interpreter start
    finally:
        pool.close()


def test_concurrent_calls_each_get_their_own_answer(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    paths = []
    for i in range(6):
        p = tmp_path / f"f{i}.txt"
        p.write_text(f"file number {i}")
        paths.append(p)
    pool = ReaderPool(size=2)
    try:
        with ThreadPoolExecutor(4) as ex:
            results = list(
                ex.map(
                    lambda p: pool.call("read_file", str(p), None, timeout_s=60, memory_mb=1024),
                    paths,
                )
            )
        assert [r[0].text for r in results] == [f"file number {i}" for i in range(6)]
        assert len(pool._idle) <= 2
    finally:
        pool.close()


def test_many_files_in_one_round_trip_each_with_its_own_outcome(tmp_path: Path) -> None:
    from knowbase.pipeline.readers import read_files_isolated

    good = [tmp_path / f"g{i}.md" for i in range(3)]
    for i, path in enumerate(good):
        path.write_text(f"# G{i}\n\ngood file {i}", encoding="utf-8")
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.4 not a pdf " * 10)
    pool = isolation._POOL
    pool.close()
    results = read_files_isolated([good[0], bad, good[1], good[2]])
    assert len(pool._idle) == 1  # one child served the whole batch
    assert isinstance(results[1], UnreadableFile)
    for n, result in zip((0, 1, 2), (results[0], results[2], results[3]), strict=True):
        assert isinstance(result, list) and f"good file {n}" in result[0].text
