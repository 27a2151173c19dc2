"""File → Markdown documents with locators, one reader per format (§4.2).

    >>> docs = read_file(Path("report.pdf"))          # doctest: +SKIP
    >>> docs[0].locator
    {'page': 1}

Dispatch is by extension **after** a signature sniff (:mod:`.sniff`): a file whose bytes
contradict its name fails ``unreadable_file``. Locators per format:

=====================  ==========================================  =========================
extension              reader                                      locator
=====================  ==========================================  =========================
.md .markdown .mdx     heading sections (:mod:`.markdown`)         ``{"heading": [...]}``
.txt                   whole file, charset detected                ``{}``
.csv                   one Markdown table                          ``{}``
.html .htm             Markdown sections                           ``{"heading": [...]}``
.pdf                   pypdf, per page with text                   ``{"page": n}``
.docx (.doc)           mammoth → Markdown sections                 ``{"heading": [...]}``
.pptx (.ppt)           per slide                                   ``{"slide": n}``
.xlsx .xls .xlsb .ods  calamine, per sheet                         ``{"sheet": name}``
.epub                  per chapter                                 ``{"chapter": title|n}``
.png .jpg .tif…        no text without OCR → ``no_text_extracted``
.rst                   heading sections (:mod:`.formats`)          ``{"heading": [...]}``
.json .yaml .py…       as text (:mod:`.formats`, ``kb formats``)   ``{}``
README, LICENSE…       extensionless, by name, as text             ``{}``
=====================  ==========================================  =========================

A Markdown file written by a processor (first line :data:`PROCESSED_MARKER`) reads back with
``{"page": n}`` locators. Untrusted files should go through :func:`read_file_isolated`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePath

from knowbase.errors import FileTooLarge, NoTextExtracted, UnreadableFile, UnsupportedFileType
from knowbase.pipeline.documents import Document
from knowbase.pipeline.readers.content import (
    COMPRESSED,
    MAX_TEXT_BYTES,
    read_compressed,
    text_verdict,
)
from knowbase.pipeline.readers.formats import IMAGE_EXTENSIONS, TEXT_EXTENSIONS, is_text_name
from knowbase.pipeline.readers.isolation import read_file_isolated, read_files_isolated
from knowbase.pipeline.readers.markdown import (
    PROCESSED_MARKER,
    read_markdown_text,
    read_processed_markdown,
)
from knowbase.pipeline.readers.pdf import pdf_page_texts, pdf_pages_without_text
from knowbase.pipeline.readers.sniff import check_signature

__all__ = [
    "IMAGE_EXTENSIONS",
    "PROCESSABLE_EXTENSIONS",
    "PROCESSED_MARKER",
    "SUPPORTED_EXTENSIONS",
    "is_readable",
    "is_supported",
    "pdf_page_texts",
    "pdf_pages_without_text",
    "read_file",
    "read_file_isolated",
    "read_files_isolated",
    "read_markdown_text",
    "read_processed_markdown",
]

PROCESSABLE_EXTENSIONS: frozenset[str] = frozenset({".pdf"}) | IMAGE_EXTENSIONS
"""Extensions a file processor (OCR) handles; with one set they reserve a ``<stem>.md`` slot."""

_TEXT_EXTENSIONS = frozenset({".txt", ".md", ".markdown", ".mdx", ".csv", ".html", ".htm"})

SUPPORTED_EXTENSIONS: frozenset[str] = (
    _TEXT_EXTENSIONS
    | PROCESSABLE_EXTENSIONS
    | frozenset({".xlsx", ".xls", ".xlsb", ".ods", ".docx", ".doc", ".pptx", ".ppt", ".epub"})
    | TEXT_EXTENSIONS
)
"""Lower-case extensions with a dot that :func:`read_file` reads by name; any other file is
read as text when its content is text (:func:`is_readable`)."""

_DECODED_WHOLE = (_TEXT_EXTENSIONS - {".html", ".htm"}) | TEXT_EXTENSIONS


def is_supported(name: str | PurePath) -> bool:
    """Whether ``name`` has a reader: by extension (case-insensitive, ``is_supported("A.PDF")``),
    or, without one, by a known text-file name (``is_supported("README")``)."""
    return PurePath(name).suffix.lower() in SUPPORTED_EXTENSIONS or is_text_name(name)


def is_readable(path: Path) -> bool:
    """Whether :func:`read_file` will try ``path``: a reader claims its name, or its first
    bytes are text (``GPL-3``, ``README.Debian``, a ``.gz`` holding text)."""
    return is_supported(path.name) or text_verdict(path) is None


def read_file(path: Path, *, max_bytes: int | None = None, as_text: bool = False) -> list[Document]:
    """Read ``path`` into non-empty documents, in file order.

    A file no reader claims by name is read as plain text when its content is text
    (:mod:`.content`: ``GPL-3``, ``README.Debian``, ``changelog.gz``); ``as_text`` reads any
    file that way (``kb add --as-text GLOB``).

    Raises UnsupportedFileType (no reader for the name, and the content is not text),
    UnreadableFile (missing, wrong signature, corrupt, truncated), FileTooLarge (over
    ``max_bytes`` or the text limit), EncryptedFile (password protected) or NoTextExtracted
    (readable but without text: a scanned PDF, an image, an empty file).
    Runs in the calling process; prefer :func:`read_file_isolated` for untrusted input.
    """
    path = Path(path)
    ext = path.suffix.lower()
    by_name = is_supported(path.name) and not as_text
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise UnreadableFile(
            f"{path.name} cannot be opened: {exc.strerror}", path=str(path), reason="io"
        ) from exc
    if max_bytes is not None and size > max_bytes:
        raise FileTooLarge(
            f"{path.name} is {size} bytes, over the {max_bytes}-byte limit",
            path=str(path),
            reason="too_big",
            size=size,
            max_bytes=max_bytes,
        )
    if by_name:
        check_signature(path, ext)
    if size == 0:
        raise NoTextExtracted(
            f"{path.name} is empty", hint="add a file with content", path=str(path)
        )
    if ext in IMAGE_EXTENSIONS and by_name:
        raise NoTextExtracted(
            f"{path.name} is an image; its text can only be read by OCR", path=str(path)
        )
    if (not by_name or ext in _DECODED_WHOLE) and ext not in COMPRESSED:
        check_text_size(path, size)
    try:
        docs = _READERS.get(ext, _TEXT_FORMAT)(path) if by_name else _by_content(path, as_text)
    except OSError as exc:
        raise UnreadableFile(
            f"{path.name} cannot be read: {exc}", path=str(path), reason="io"
        ) from exc
    docs = [d for d in docs if d.text.strip()]
    if not docs:
        hint = NoTextExtracted.hint if ext == ".pdf" else "the file has no readable text"
        raise NoTextExtracted(f"{path.name} contains no text", hint=hint, path=str(path))
    return docs


def check_text_size(path: Path, size: int) -> None:
    """Raise FileTooLarge when a file read whole as text is past :data:`MAX_TEXT_BYTES`:
    decoded, it takes one to four bytes a character, and the indexer holds it several times."""
    if size > MAX_TEXT_BYTES:
        raise FileTooLarge(
            f"{path.name} is {size} bytes, over the {MAX_TEXT_BYTES // 2**20} MiB text limit "
            "per item",
            path=str(path),
            reason="text_too_large",
            size=size,
            limit_bytes=MAX_TEXT_BYTES,
        )


def _by_content(path: Path, forced: bool) -> list[Document]:
    """A file no reader claims by name: its text when it is text (decompressed if need be)."""
    from knowbase.pipeline.readers.text import decode_text

    ext = path.suffix.lower()
    if ext in COMPRESSED:
        data = read_compressed(path)
    else:
        verdict = None if forced else text_verdict(path)
        if verdict is not None:
            raise UnsupportedFileType(
                f"{path.name}: no reader for {ext or 'a name without extension'}, and its "
                f"content is not text: it {verdict}",
                path=str(path),
                extension=ext,
                reason=verdict,
            )
        data = path.read_bytes()
    try:
        return [Document(decode_text(data, name=path.name))]
    except UnreadableFile:
        if not forced:
            raise
    # The user said it is text: index what decodes, rather than nothing.
    return [Document(data.decode("utf-8", "replace").replace("\x00", ""))]


def _markdown(path: Path) -> list[Document]:
    from knowbase.pipeline.readers.text import decode_text

    return read_markdown_text(decode_text(path.read_bytes(), name=path.name))


def _lazy(module: str, func: str, *args: str) -> Callable[[Path], list[Document]]:
    # Readers import their libraries (pypdf, calamine, mammoth, lxml…) only when used, so
    # `import knowbase` stays light and a child process pays only for the formats it reads.
    def call(path: Path) -> list[Document]:
        import importlib

        return getattr(importlib.import_module(f"knowbase.pipeline.readers.{module}"), func)(
            path, *args
        )

    return call


_TEXT_FORMAT = _lazy("formats", "read_text_format")

_READERS: dict[str, Callable[[Path], list[Document]]] = {
    ".txt": _lazy("text", "read_text_file"),
    ".csv": _lazy("text", "read_csv_file"),
    ".md": _markdown,
    ".markdown": _markdown,
    ".mdx": _markdown,
    ".html": _lazy("html", "read_html_file"),
    ".htm": _lazy("html", "read_html_file"),
    ".pdf": _lazy("pdf", "read_pdf"),
    ".docx": _lazy("office", "read_docx"),
    ".pptx": _lazy("office", "read_pptx"),
    ".doc": _lazy("office", "read_legacy_office", "docx"),
    ".ppt": _lazy("office", "read_legacy_office", "pptx"),
    ".xlsx": _lazy("spreadsheet", "read_spreadsheet"),
    ".xls": _lazy("spreadsheet", "read_spreadsheet"),
    ".xlsb": _lazy("spreadsheet", "read_spreadsheet"),
    ".ods": _lazy("spreadsheet", "read_spreadsheet"),
    ".epub": _lazy("epub", "read_epub"),
}
