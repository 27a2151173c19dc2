"""PDF → one document per page with text, via pypdf's text layer (locator ``{"page": n}``).

pypdf page by page keeps two-column titles and right-to-left text intact where markitdown
does not (DESIGN.md). Scanned pages have no text layer and come out empty; the OCR processor
(:mod:`knowbase.pipeline.processing`) finds them with :func:`pdf_pages_without_text`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from knowbase.errors import EncryptedFile, UnreadableFile
from knowbase.pipeline.documents import Document

# pypdf logs every recoverable oddity of real-world PDFs at WARNING; they are not ours to act on.
logging.getLogger("pypdf").setLevel(logging.ERROR)

_TAIL_BYTES = 2048


def read_pdf(path: Path) -> list[Document]:
    """Documents for the pages that have text, in page order (1-based locators)."""
    return [
        Document(text, {"page": n})
        for n, text in enumerate(pdf_page_texts(path), start=1)
        if text.strip()
    ]


def pdf_pages_without_text(path: Path) -> list[int]:
    """1-based numbers of the pages whose text layer is empty (the ones OCR must read)."""
    return [n for n, text in enumerate(pdf_page_texts(path), start=1) if not text.strip()]


def pdf_page_texts(path: Path) -> list[str]:
    """The text layer of every page, ``""`` for pages without one.

    Raises EncryptedFile when a password is needed (the empty user password is tried
    first, as viewers do), UnreadableFile when the file is truncated or corrupt.
    """
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    _check_complete(path)
    try:
        reader = PdfReader(str(path), strict=False)
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")
            except (FileNotDecryptedError, NotImplementedError) as exc:
                raise _encrypted(path) from exc
            if not opened:
                raise _encrypted(path)
        texts = []
        for page in reader.pages:
            texts.append(_clean(page.extract_text() or ""))
        return texts
    except (EncryptedFile, UnreadableFile):
        raise
    except FileNotDecryptedError as exc:
        raise _encrypted(path) from exc
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise UnreadableFile(
            f"{path.name} is not a readable PDF: {exc}", path=str(path), reason="corrupt_pdf"
        ) from exc
    except RecursionError as exc:
        raise UnreadableFile(
            f"{path.name} has a cyclic or too deeply nested structure",
            path=str(path),
            reason="corrupt_pdf",
        ) from exc


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
