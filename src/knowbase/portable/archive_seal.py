"""The whole-archive seal of a base archive (format version 2): a sha256 of every byte.

Each member carries its own sha256 in the manifest, but a zip is more than its members: local
headers, extra fields, the central directory and its sizes, the end record and its comment
length. A byte flipped there can leave every member readable and still change what the archive
says (an extra field, a size, a file mode). So the exporter seals the file: the zip comment is
``knowbase-sha256:`` and the hex sha256 of every byte before the comment (the end record's
comment length included). The importer recomputes it before trusting anything else in a
version-2 archive; a version-1 archive (exported before the seal existed) has only its
members' checksums.

    seal(Path("docs.kbz"))          # after the zip is closed
    verify_seal(Path("docs.kbz"))   # ArchiveInvalid when any byte differs
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from knowbase.errors import ArchiveInvalid

PREFIX = b"knowbase-sha256:"
SEAL_BYTES = len(PREFIX) + 64
#: The comment the writer sets before closing the zip; :func:`seal` overwrites it in place.
PLACEHOLDER = PREFIX + b"0" * 64
_BLOCK = 1 << 20


def _digest(path: Path, length: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        left = length
        while left > 0 and (block := fh.read(min(_BLOCK, left))):
            digest.update(block)
            left -= len(block)
    return digest.hexdigest()


def seal(path: Path) -> None:
    """Write the digest of ``path``'s bytes before its comment into the comment (the zip was
    closed with :data:`PLACEHOLDER` as its comment, so the file's length does not change)."""
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(size - SEAL_BYTES)
        if fh.read(SEAL_BYTES) != PLACEHOLDER:
            raise ValueError(f"{path} does not end with the seal placeholder")
    digest = _digest(path, size - SEAL_BYTES)
    with open(path, "r+b") as fh:
        fh.seek(size - SEAL_BYTES)
        fh.write(PREFIX + digest.encode("ascii"))
        fh.flush()
        os.fsync(fh.fileno())


def verify_seal(path: Path) -> None:
    """ArchiveInvalid unless ``path`` ends with a seal that matches every byte before it."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        fh.seek(max(0, size - SEAL_BYTES))
        tail = fh.read(SEAL_BYTES)
    if len(tail) != SEAL_BYTES or not tail.startswith(PREFIX):
        raise ArchiveInvalid(
            "the archive's seal (its zip comment) is missing or damaged", path=str(path)
        )
    if _digest(path, size - SEAL_BYTES).encode("ascii") != tail[len(PREFIX) :]:
        raise ArchiveInvalid(
            "the archive was changed after it was written (its zip headers, central directory "
            "or comment differ from its seal)",
            hint="export the base again; a copy that went through a damaged disk or transfer "
            "cannot be trusted",
            path=str(path),
        )


__all__ = ["PLACEHOLDER", "SEAL_BYTES", "seal", "verify_seal"]
