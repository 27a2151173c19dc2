"""Files no reader claims by name: read them when their content is text (issue 41).

A real ``/usr/share/doc`` folder holds ``GPL-3``, ``README.Debian``, ``foo.copyright`` and
``changelog.Debian.gz``: text under names no extension list will ever cover. So a file whose
name no reader claims is judged by its first bytes (:func:`text_verdict`): valid text in UTF-8,
UTF-16 or a detected legacy encoding, without NUL bytes or a run of control characters, is
read as plain text. ``.gz``, ``.bz2`` and ``.xz`` files holding one text stream are read
decompressed, inside the same bounds as zip containers (:mod:`.sniff`): at most
:data:`~knowbase.pipeline.readers.sniff.MAX_RATIO` times the file's size once past a small
floor, and never more than the reader's text limit (:data:`.text.MAX_TEXT_BYTES`).

    >>> text_verdict_of(b"GNU GENERAL PUBLIC LICENSE\\n   Version 3\\n")
    >>> text_verdict_of(b"\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00")
    'is a program (executable or object code)'

Programs are never text, however short: a file named like one (``tool.exe``) or starting with
an executable's signature (ELF, Mach-O, Java class) is refused before its bytes are decoded.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Callable
from pathlib import Path
from typing import IO

from knowbase.errors import FileTooLarge, UnreadableFile
from knowbase.pipeline.readers.sniff import MAX_RATIO, sniff_head
from knowbase.pipeline.readers.text import MAX_TEXT_BYTES, decode_text

HEAD_BYTES = 8 * 1024
"""How much of an unknown file is looked at to decide whether it is text: git's 8,000-byte
rule of thumb. A folder walk reads this much of every file no reader claims by name, so it
stays small (a tree of 100k images costs 800 MB of reads at 8 KiB, 6.4 GB at 64 KiB)."""

_RATIO_FLOOR = 1024 * 1024  # small files compress far better than big ones; no ratio below this

COMPRESSED: dict[str, Callable[[Path], IO[bytes]]] = {
    ".gz": gzip.GzipFile,
    ".bz2": bz2.BZ2File,
    ".xz": lzma.LZMAFile,
}
"""Single-stream compressors whose content is read when it is text (``changelog.gz``)."""


PROGRAM_SUFFIXES = frozenset(
    [
        ".exe",
        ".dll",
        ".so",
        ".dylib",
        ".o",
        ".obj",
        ".a",
        ".lib",
        ".class",
        ".pyc",
        ".pyo",
        ".sys",
        ".msi",
        ".elf",
    ]
)
"""Names that hold programs or object code: refused whatever their first bytes look like."""

_PROGRAM_MAGIC = (
    b"\x7fELF",
    b"\xfe\xed\xfa\xce",
    b"\xfe\xed\xfa\xcf",
    b"\xce\xfa\xed\xfe",
    b"\xcf\xfa\xed\xfe",
    b"\xca\xfe\xba\xbe",
)
_PROGRAM = "is a program (executable or object code)"


def text_verdict_of(head: bytes) -> str | None:
    """``None`` when ``head`` (a file's first bytes) reads as text, else why it does not.

    The head may end inside a multi-byte character; that is not held against it.
    """
    if head.startswith(_PROGRAM_MAGIC):
        return _PROGRAM
    kind = sniff_head(head)
    if kind not in ("other", "empty"):
        return f"is a {kind.upper()} file"
    if not head:
        return None
    cut = len(head) == HEAD_BYTES
    for trim in range(4 if cut else 1):  # a character cut at the end of the head
        try:
            decode_text(head[: len(head) - trim] if trim else head, name="file")
            return None
        except UnreadableFile as exc:
            why = exc.message.split(": it ", 1)[-1]
    return why


def text_verdict(path: Path) -> str | None:
    """``None`` when the file at ``path`` reads as text (decompressed for ``.gz`` and kin),
    else why not; an unreadable file gives its OS error."""
    if path.suffix.lower() in PROGRAM_SUFFIXES:
        return f"{_PROGRAM.removesuffix(')')}, by its name: {path.suffix})"
    opener = COMPRESSED.get(path.suffix.lower())
    try:
        if opener is None:
            with path.open("rb") as fh:
                head = fh.read(HEAD_BYTES)
        else:
            with opener(path) as fh:
                head = fh.read(HEAD_BYTES)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        return f"cannot be read ({exc})"
    verdict = text_verdict_of(head)
    if verdict is not None and opener is not None:
        return f"holds a file that {verdict.removeprefix('is ').removeprefix('contains ')}"
    return verdict


def read_compressed(path: Path, *, limit: int = MAX_TEXT_BYTES) -> bytes:
    """The decompressed bytes of a ``.gz``/``.bz2``/``.xz`` file, read in bounded steps.

    Raises FileTooLarge past ``limit`` or past :data:`MAX_RATIO` times the file's size (a
    decompression bomb), UnreadableFile for a corrupt or truncated stream.
    """
    opener = COMPRESSED[path.suffix.lower()]
    packed = max(path.stat().st_size, 1)
    bound = min(limit, max(_RATIO_FLOOR, packed * MAX_RATIO))
    try:
        with opener(path) as fh:
            data = fh.read(bound + 1)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise UnreadableFile(
            f"{path.name} cannot be decompressed: {exc}", path=str(path), reason="bad_stream"
        ) from exc
    if len(data) > bound:
        why = (
            f"the {limit // 2**20} MiB text limit per item"
            if bound == limit
            else f"{MAX_RATIO} times its {packed}-byte size (a likely decompression bomb)"
        )
        raise FileTooLarge(
            f"{path.name} decompresses to more than {why}",
            path=str(path),
            reason="decompressed_too_large",
            limit_bytes=bound,
        )
    return data
