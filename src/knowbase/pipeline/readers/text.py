"""Plain text and CSV: bytes → str with charset detection, never a lossy UTF-8 decode.

Legacy files (cp1252 from Windows, cp932 from Japanese Windows, Big5…) are common in real
folders; ``errors="replace"`` would silently index mojibake. UTF-8 is tried strictly first
(it is by far the most common and a strict decode rarely succeeds by accident), then BOMs,
then ``charset-normalizer``. Bytes that decode to nothing sensible fail ``unreadable_file``.
"""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from knowbase.errors import FileTooLarge, UnreadableFile
from knowbase.pipeline.documents import Document

MAX_TEXT_BYTES = 32 * 1024 * 1024
"""The most text one item may produce (decoded file, decompressed stream, rendered table).

The text crosses from the reader child to the indexer, which holds it several times over
while chunking and writing it: measured on ``kb add`` of CSVs (BM25 base, issue 41), 28 MB of
Markdown peaked at 271 MB of RSS, 33 MB at 307 MB, 65 MB at 529 MB. 32 MiB keeps an item near
300 MB; a file past it fails ``too_large`` (``tests/pipeline/readers/test_readers_memory.py``).
"""

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_DETECT_BYTES = 1024 * 1024
_MAX_CONTROL_RATIO = 0.02


def decode_text(data: bytes, *, name: str = "file") -> str:
    """Decode bytes of a text file, detecting legacy encodings.

    >>> decode_text("café".encode("cp1252"))
    'café'

    Raises UnreadableFile for binary content (NUL bytes, control characters, no plausible
    encoding).
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return _checked(data[len(bom) :].decode(encoding), name)
            except UnicodeDecodeError as exc:
                raise _binary(name, f"invalid {encoding} after its byte-order mark") from exc
    if b"\x00" in data[:_DETECT_BYTES]:
        encoding = utf16_without_bom(data[:_DETECT_BYTES])
        if encoding is None:
            raise _binary(name, "contains NUL bytes")
        try:
            return _checked(data[: len(data) // 2 * 2].decode(encoding), name)
        except UnicodeDecodeError as exc:
            raise _binary(name, f"is not valid {encoding}") from exc
    try:
        return _checked(data.decode("utf-8"), name)
    except UnicodeDecodeError:
        pass
    western = _as_western(data)
    if western is not None:
        return _checked(western, name)
    import charset_normalizer

    best = charset_normalizer.from_bytes(data[:_DETECT_BYTES]).best()
    if best is None or best.encoding is None:
        raise _binary(name, "no text encoding fits its bytes")
    try:
        text = data.decode(best.encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        raise _binary(name, f"does not decode as {best.encoding}") from exc
    return _checked(text, name)


def utf16_without_bom(head: bytes) -> str | None:
    """``"utf-16-le"`` or ``"utf-16-be"`` when ``head`` is UTF-16 text without a byte-order
    mark, else None: most text is in the first 256 code points, whose high byte is NUL, so
    NULs fill one parity of positions and almost never the other (Windows tools write LE,
    Java and network formats BE).

    >>> utf16_without_bom("plain text".encode("utf-16-be"))
    'utf-16-be'
    """
    if len(head) < 16:  # too few characters to tell a pattern from chance
        return None
    even, odd = head[0::2], head[1::2]
    even_nul, odd_nul = even.count(0) / len(even), odd.count(0) / len(odd)
    if odd_nul >= 0.3 and even_nul <= 0.01:
        return "utf-16-le"
    if even_nul >= 0.3 and odd_nul <= 0.01:
        return "utf-16-be"
    return None


# Non-ASCII characters that Western European text in cp1252 actually uses.
_WESTERN = frozenset(
    "àáâãäåæçèéêëìíîïðñòóôõöøùúûüýþÿÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÐÑÒÓÔÕÖØÙÚÛÜÝÞßœŒšŠžŽŸ"
    "–—‘’‚“”„•…€«»°©®™£¥§¶·¡¿ª º±×÷\u00a0"
)


def _as_western(data: bytes) -> str | None:
    # charset-normalizer often names cp1257/cp1250/mac_latin2 for short French or English
    # cp1252 text (measured: "très" came back "trčs"). cp1252 is by far the most common
    # legacy single-byte encoding, so take it when every non-ASCII character it yields is one
    # Western text really uses; Cyrillic, Greek, Polish or CJK bytes fail that test.
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        return None
    extra = [ch for ch in text if ord(ch) > 127]
    if not extra:
        return None
    plausible = sum(1 for ch in extra if ch in _WESTERN)
    letters = sum(1 for ch in text if ch.isalpha())
    # Western languages stay mostly ASCII letters; cp1251 Russian read as cp1252 does not.
    extra_letters = sum(1 for ch in extra if ch.isalpha())
    mostly_ascii = extra_letters <= 0.3 * max(letters, 1)
    return text if mostly_ascii and plausible / len(extra) >= 0.98 else None


def _checked(text: str, name: str) -> str:
    if not text:
        return text
    # ESC starts the ANSI colour codes of terminal output saved as text (man pages, logs).
    controls = sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r\f\v\x1b")
    controls += text.count("\ufffd")
    if controls / len(text) > _MAX_CONTROL_RATIO:
        raise _binary(name, "is mostly control characters")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _binary(name: str, why: str) -> UnreadableFile:
    return UnreadableFile(f"{name} does not look like text: it {why}", path=name, reason="not_text")


def read_text_file(path: Path) -> list[Document]:
    """One document holding the whole decoded file; locator ``{}``."""
    return [Document(decode_text(path.read_bytes(), name=path.name))]


def read_csv_file(path: Path) -> list[Document]:
    """The CSV as Markdown tables of at most :data:`TABLE_BLOCK_CHARS` each, every one with
    the header row (:func:`csv_documents`)."""
    text = decode_text(path.read_bytes(), name=path.name)
    return csv_documents(text, name=path.name)


TABLE_BLOCK_CHARS = 64 * 1024
"""The most Markdown one document of a long table holds; the next block repeats the header.

A 12 MB CSV used to become one 28 MB document, and chunking it indexed every line break of
it at once (660 MB of RSS for ``kb add``, issue 41). In blocks, the chunker's work per
document is bounded, and a hit cites the rows it came from (``{"rows": [first, last]}``)."""


def csv_documents(
    text: str,
    *,
    name: str = "file",
    limit: int = MAX_TEXT_BYTES,
    block_chars: int = TABLE_BLOCK_CHARS,
) -> list[Document]:
    """Render CSV text as Markdown tables, row by row, guessing the delimiter among
    ``, ; tab |``; blank rows are dropped, ragged rows padded, all-empty trailing columns cut.

    One block keeps the locator ``{}``; several are located by their data rows (1-based,
    header excluded). Raises FileTooLarge when the Markdown would pass ``limit`` characters.

        >>> [d.text for d in csv_documents("a,b\\n1,2\\n")]
        ['| a | b |\\n|---|---|\\n| 1 | 2 |']
    """
    if not text.strip():
        return [Document("")]
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(
            text[:16384], delimiters=",;\t|"
        )
    except csv.Error:
        dialect = csv.excel

    def rows() -> Iterator[list[str]]:
        # Parsed twice (width, then lines) rather than held: 2M rows as lists took ~400 MB.
        return csv.reader(io.StringIO(text), dialect)

    return table_documents(rows, name=name, limit=limit, block_chars=block_chars)


def table_documents(
    rows: Callable[[], Iterable[Sequence[str]]],
    *,
    locator: dict[str, Any] | None = None,
    name: str = "file",
    limit: int = MAX_TEXT_BYTES,
    block_chars: int = TABLE_BLOCK_CHARS,
) -> list[Document]:
    """A table as Markdown blocks of at most ``block_chars``, each with the header row (the
    first non-blank row); ``rows()`` is iterated twice (the width, then the lines), so a
    caller can stream them. Blank rows are dropped, ragged rows padded, trailing columns that
    are empty everywhere cut. One block keeps ``locator``; several add ``"rows": [first,
    last]`` (data rows, 1-based). Raises FileTooLarge past ``limit`` characters.
    """
    width = 0
    for row in rows():
        for k in range(len(row) - 1, width - 1, -1):
            if row[k].strip():
                width = k + 1
                break
    if not width:
        return []
    blocks: list[tuple[str, int, int]] = []
    lines: list[str] = []
    header, size, total, first, n = "", 0, 0, 1, 0
    for row in rows():
        if not any(c.strip() for c in row):
            continue
        cells = [_cell(c) for c in row[:width]] + [""] * (width - len(row[:width]))
        line = "| " + " | ".join(cells) + " |"
        if not header:
            header = line + "\n|" + "|".join(["---"] * width) + "|"
            size = len(header)
            continue
        if lines and size + len(line) + 1 > block_chars:
            blocks.append(("\n".join([header, *lines]), first, n))
            lines, size, first = [], len(header), n + 1
        lines.append(line)
        n += 1
        size += len(line) + 1
        total += len(line) + 1
        if total > limit:
            raise FileTooLarge(
                f"{name} renders to more than the {limit // 2**20} MiB text limit per item "
                f"(a table of {n:,}+ rows)",
                path=name,
                reason="text_too_large",
                limit_bytes=limit,
            )
    blocks.append(("\n".join([header, *lines]), first, n))
    base = dict(locator or {})
    if len(blocks) == 1:
        return [Document(blocks[0][0], base)]
    return [Document(t, {**base, "rows": [a, b]}) for t, a, b in blocks]


def csv_to_markdown(text: str) -> str:
    """CSV text as one Markdown table (see :func:`csv_documents`)."""
    return "\n\n".join(d.text for d in csv_documents(text, block_chars=2**62))


def rows_to_markdown(rows: list[list[str]]) -> str:
    """Rows of cell strings → a Markdown table; blank rows dropped, ragged rows padded."""
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    # Trailing columns that are empty everywhere are layout debris, not data.
    while width > 1 and all(len(row) < width or not row[width - 1].strip() for row in rows):
        width -= 1
    lines = []
    for i, row in enumerate(rows):
        cells = [_cell(c) for c in row[:width]] + [""] * (width - len(row[:width]))
        lines.append("| " + " | ".join(cells) + " |")
        if i == 0:
            lines.append("|" + "|".join(["---"] * width) + "|")
    return "\n".join(lines)


def _cell(value: str) -> str:
    return value.strip().replace("|", "\\|").replace("\r\n", " ").replace("\n", " ")
