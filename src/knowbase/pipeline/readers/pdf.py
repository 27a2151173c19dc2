"""PDF → one Markdown document per page with text (locator ``{"page": n}``, plus ``"heading"``).

Each page is parsed by pdfium (:mod:`.pdf_pdfium`, pypdfium2; pdfplumber/pdfminer only for a
page whose text runs in no main direction) and goes through :mod:`.pdf_layout`: tables become
pipe tables, large-font lines ``#`` headings, two-column pages are read column by column, words
broken at line ends are joined. A heading path carries over page breaks, so a page's text before
its first heading cites the last heading of the pages before. Scanned pages have no text layer
and come out empty; the OCR processor (:mod:`knowbase.pipeline.processing`) finds them with
:func:`pdf_pages_without_text` and reads the other pages through :func:`pdf_page_texts`, so they
keep their structure too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from knowbase.errors import EncryptedFile, UnreadableFile
from knowbase.pipeline.documents import Document

# pdfminer and pypdf log every recoverable oddity of real-world PDFs at WARNING; they are not
# ours to act on.
logging.getLogger("pypdf").setLevel(logging.ERROR)
logging.getLogger("pdfminer").setLevel(logging.ERROR)

_TAIL_BYTES = 2048
BACKEND = "pdfium"
"""``"pdfium"``: pages are parsed by pdfium (:mod:`.pdf_pdfium`, ~10x faster than pdfminer),
rotated and sideways pages by pdfplumber; ``"pdfplumber"``: every page by pdfplumber (the
benchmark compares the two)."""
STRUCTURE_BUDGET_S = 45.0
"""Seconds of structured reading per file; later pages get pypdf's plain page text.

Structure costs ~0.05-0.15 s a page with pdfium (0.2-0.6 s over pdfminer) against ~0.05 s for
pypdf, and the isolated reader stops a file after 120 s: a long, table-heavy file must still be
read.
"""


def read_pdf(path: Path, pages: Iterable[int] | None = None) -> list[Document]:
    """Documents for the pages that have text, in page order (1-based locators).

    ``pages`` limits the reading to those 1-based page numbers (the benchmark reads page 1).
    """
    from knowbase.pipeline.readers.markdown import read_markdown_text

    docs: list[Document] = []
    heading: list[str] = []
    for n, text in enumerate(pdf_page_texts(path, pages), start=1):
        if not text.strip():
            continue
        for sec in read_markdown_text(text):
            path_ = sec.locator.get("heading") or heading
            heading = list(path_)
            locator = {"page": n, "heading": heading} if heading else {"page": n}
            docs.append(Document(sec.text, locator))
    return docs


def pdf_pages_without_text(path: Path) -> list[int]:
    """1-based numbers of the pages whose text layer is empty (the ones OCR must read)."""
    return [n for n, text in enumerate(pdf_page_texts(path), start=1) if not text.strip()]


def pdf_page_texts(
    path: Path, pages: Iterable[int] | None = None, *, budget_s: float = STRUCTURE_BUDGET_S
) -> list[str]:
    """The Markdown of every page, ``""`` for pages without a text layer (or not in ``pages``).

    Pages read after ``budget_s`` seconds come from pypdf as plain text (no tables or
    headings, still with their page locator and words joined).

    Raises EncryptedFile when a password is needed (the empty user password is tried
    first, as viewers do), UnreadableFile when the file is truncated or corrupt.
    """
    from pdfminer.pdfdocument import PDFPasswordIncorrect
    from pdfplumber.utils.exceptions import PdfminerException

    from knowbase.pipeline.readers.pdf_layout import page_markdown

    _check_complete(path)
    wanted = set(pages) if pages is not None else None
    deadline = time.monotonic() + budget_s
    fast = _open_pdfium(path) if BACKEND == "pdfium" else None
    slow = _Plumber(path)  # pdfminer's parse, opened only for a page pdfium cannot turn
    try:
        count = len(fast) if fast is not None else len(slow.pages())
        texts: list[str] = []
        for n in range(1, count + 1):
            if wanted is not None and n not in wanted:
                texts.append("")
            elif n > 1 and time.monotonic() > deadline:
                rest = _plain_texts(path, n)
                texts += [t if wanted is None or m in wanted else "" for m, t in rest]
                break
            elif (adapted := _pdfium_page(fast, n - 1)) is not None:
                texts.append(_clean(page_markdown(adapted)))
            elif n > len(slow.pages()):
                texts.append("")  # pdfium counts a page pdfminer does not find
            else:
                page = slow.pages()[n - 1]
                if _sideways(page.chars):
                    texts.append(_clean(_turned_markdown(path, n) or page_markdown(page)))
                else:
                    texts.append(_clean(page_markdown(page)))
                page.close()  # drop the page's parsed objects: memory stays flat on long files
        return texts
    except PdfminerException as exc:
        cause = exc.args[0] if exc.args else exc
        if isinstance(cause, PDFPasswordIncorrect) or "password" in str(cause).lower():
            raise _encrypted(path) from exc
        raise _corrupt(path, exc) from exc
    except PDFPasswordIncorrect as exc:
        raise _encrypted(path) from exc
    except (ValueError, KeyError, TypeError, AttributeError, OSError, AssertionError) as exc:
        raise _corrupt(path, exc) from exc
    except RecursionError as exc:
        raise UnreadableFile(
            f"{path.name} has a cyclic or too deeply nested structure",
            path=str(path),
            reason="corrupt_pdf",
        ) from exc
    finally:
        slow.close()
        if fast is not None:
            from knowbase.pipeline.readers.pdf_pdfium import LOCK

            with LOCK:
                fast.close()


class _Plumber:
    """The file opened by pdfplumber on first use (its open alone parses the whole page tree in
    Python: ~0.15 s for a 36-page manual)."""

    def __init__(self, path: Path) -> None:
        self._path, self._pdf = path, None

    def pages(self) -> list:
        import pdfplumber

        if self._pdf is None:
            self._pdf = pdfplumber.open(str(self._path), password="")
        return self._pdf.pages

    def close(self) -> None:
        if self._pdf is not None:
            self._pdf.close()


def _open_pdfium(path: Path) -> Any:
    """The file opened by pdfium, or None (then every page goes through pdfplumber, which
    also reports why the file is unreadable)."""
    import pypdfium2

    from knowbase.pipeline.readers.pdf_pdfium import LOCK

    try:
        with LOCK:
            return pypdfium2.PdfDocument(str(path), password="")
    except pypdfium2.PdfiumError:
        return None


def _pdfium_page(pdf: Any, index: int) -> Any:
    """Page ``index`` read by pdfium (:mod:`.pdf_pdfium`), or None where pdfplumber reads it."""
    if pdf is None:
        return None
    import pypdfium2

    from knowbase.pipeline.readers.pdf_pdfium import open_page

    try:
        return open_page(pdf, index)
    except (pypdfium2.PdfiumError, ValueError, OSError):
        return None


def _plain_texts(path: Path, first: int) -> list[tuple[int, str]]:
    """pypdf's text of pages ``first``… as ``(page number, text)``, words at line ends joined."""
    from pypdf import PdfReader

    from knowbase.pipeline.readers.pdf_layout import join_broken_words

    reader = PdfReader(str(path), strict=False)
    if reader.is_encrypted:
        reader.decrypt("")
    return [
        (n, _clean(join_broken_words(reader.pages[n - 1].extract_text() or "")))
        for n in range(first, len(reader.pages) + 1)
    ]


def _sideways(chars: list[dict]) -> bool:
    # A table printed at 90° on a portrait page: most glyphs run up or down the page.
    return sum(1 for c in chars if not c["upright"]) > 0.6 * max(1, len(chars))


def _turned_markdown(path: Path, n: int) -> str | None:
    """Page ``n`` read after turning it a quarter so that its text runs left to right.

    pdfminer applies the page's /Rotate to every glyph, so a one-page copy with the rotation
    changed (pypdf) reads upright; the turn whose glyphs are upright *and* not upside down wins.
    """
    import io

    import pdfplumber
    from pypdf import PdfReader, PdfWriter

    from knowbase.pipeline.readers.pdf_layout import page_markdown

    source = PdfReader(str(path), strict=False)
    if source.is_encrypted:
        source.decrypt("")
    for turn in (90, 270):
        writer = PdfWriter()
        writer.add_page(source.pages[n - 1])
        writer.pages[0].rotate(turn)
        buf = io.BytesIO()
        writer.write(buf)
        buf.seek(0)
        with pdfplumber.open(buf) as pdf:
            page = pdf.pages[0]
            forward = sum(1 for c in page.chars if c["upright"] and c["matrix"][0] > 0)
            if forward > 0.6 * max(1, len(page.chars)):
                return page_markdown(page)
    return None


def _corrupt(path: Path, exc: BaseException) -> UnreadableFile:
    return UnreadableFile(
        f"{path.name} is not a readable PDF: {exc}", path=str(path), reason="corrupt_pdf"
    )


def _check_complete(path: Path) -> None:
    # pypdf rebuilds a missing cross-reference table and happily returns the first pages of a
    # half-downloaded file; a complete PDF always ends with %%EOF (viewers look in the last 1 KiB).
    size = path.stat().st_size
    with path.open("rb") as fh:
        fh.seek(max(0, size - _TAIL_BYTES))
        tail = fh.read()
    if b"%%EOF" not in tail:
        raise UnreadableFile(
            # "%%EOF" is the marker's real spelling (two percent signs), not a format escape.
            f"{path.name} is truncated: it lacks the PDF end-of-file marker '%%EOF' at its "
            "end; download or copy it again",
            path=str(path),
            reason="truncated",
        )


def _encrypted(path: Path) -> EncryptedFile:
    return EncryptedFile(f"{path.name} is a password-protected PDF", path=str(path))


def _clean(text: str) -> str:
    # Trailing spaces per line are extraction noise; keep line structure for the splitter.
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines).strip("\n")
