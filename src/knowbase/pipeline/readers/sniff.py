"""File signatures: what a file really is, checked before a reader is chosen.

A garbage file named ``.xls`` must fail ``unreadable_file``, not be read as text (DESIGN.md,
"What the libraries get wrong"), and an OOXML file saved with a password is an OLE container,
not a zip: both are decided here from the first bytes, never from the extension alone.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Literal

from knowbase.errors import EncryptedFile, UnreadableFile

Kind = Literal["pdf", "zip", "ole", "png", "jpeg", "tiff", "gif", "empty", "other"]

_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_HEAD_BYTES = 4096

# Which container each extension must arrive in. Extensions absent here are text formats.
EXPECTED_KIND: dict[str, Kind] = {
    ".pdf": "pdf",
    ".docx": "zip",
    ".pptx": "zip",
    ".xlsx": "zip",
    ".xlsb": "zip",
    ".ods": "zip",
    ".epub": "zip",
    ".xls": "ole",
    ".doc": "ole",
    ".ppt": "ole",
    ".png": "png",
    ".jpg": "jpeg",
    ".jpeg": "jpeg",
    ".tif": "tiff",
    ".tiff": "tiff",
}

_OOXML = {".docx", ".pptx", ".xlsx", ".xlsb"}

# Zip-bomb guard for zip containers (xlsx, docx, pptx, ods, epub): honest office files compress
# XML 5-30x; a ratio beyond this with a large declared size is a bomb, not a workbook.
MAX_UNCOMPRESSED_BYTES = 2 * 1024**3
MAX_RATIO = 100
RATIO_FLOOR_BYTES = 256 * 1024**2


def sniff_head(head: bytes) -> Kind:
    """Classify a file from its first bytes (``b"%PDF-1.7…"`` → ``"pdf"``)."""
    if not head:
        return "empty"
    if head.startswith(_OLE):
        return "ole"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")):
        return "zip"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return "tiff"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    # The PDF spec lets the header sit anywhere in the first 1024 bytes.
    if b"%PDF-" in head[:1024]:
        return "pdf"
    return "other"


def sniff(path: Path) -> Kind:
    """Classify the file at ``path`` by its signature."""
    with path.open("rb") as fh:
        return sniff_head(fh.read(_HEAD_BYTES))


def check_signature(path: Path, ext: str) -> Kind:
    """Raise unless the file's signature matches what ``ext`` promises; return the kind.

    Text extensions (``.txt``, ``.csv``…) accept anything that is not a known binary container.
    """
    kind = sniff(path)
    expected = EXPECTED_KIND.get(ext)
    if kind == "empty":
        if expected is not None:
            raise UnreadableFile(
                f"{path.name} is empty (0 bytes), not a valid {ext} file",
                path=str(path),
                reason="empty",
            )
        return kind
    if expected is None:
        if kind in ("other",):
            return kind
        raise UnreadableFile(
            f"{path.name} is named {ext} but its content is a {kind.upper()} file; "
            "rename it with the right extension",
            path=str(path),
            reason="signature_mismatch",
            detected=kind,
        )
    if kind == expected:
        return kind
    if kind == "ole" and ext in _OOXML and _is_encrypted_ooxml(path):
        raise EncryptedFile(
            f"{path.name} is password protected", path=str(path), reason="encrypted_ooxml"
        )
    raise UnreadableFile(
        f"{path.name} is named {ext} but its signature says {kind.upper()}; "
        "the file is corrupt or has the wrong extension",
        path=str(path),
        reason="signature_mismatch",
        detected=kind,
    )


def _is_encrypted_ooxml(path: Path) -> bool:
    # A password-protected docx/xlsx/pptx is an OLE compound file holding the streams
    # "EncryptionInfo" and "EncryptedPackage"; their names sit in the directory sectors.
    marker = "EncryptedPackage".encode("utf-16-le")
    with path.open("rb") as fh:
        data = fh.read(4 * 1024 * 1024)
    return marker in data


def check_zip(path: Path) -> zipfile.ZipFile:
    """Open ``path`` as a zip after the bomb guard; the caller closes it.

    Raises UnreadableFile when the central directory is broken, or the declared uncompressed
    size is absurd for the archive's size.
    """
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UnreadableFile(
            f"{path.name} is not a readable zip container (truncated or corrupt): {exc}",
            path=str(path),
            reason="bad_zip",
        ) from exc
    total = sum(max(info.file_size, 0) for info in zf.infolist())
    compressed = max(path.stat().st_size, 1)
    ratio = total / compressed
    if total > MAX_UNCOMPRESSED_BYTES or (total > RATIO_FLOOR_BYTES and ratio > MAX_RATIO):
        zf.close()
        raise UnreadableFile(
            f"{path.name} declares {total} uncompressed bytes from {compressed} on disk "
            f"(ratio {ratio:.0f}); refusing a likely zip bomb",
            path=str(path),
            reason="zip_bomb",
            uncompressed_bytes=total,
            compressed_bytes=compressed,
        )
    return zf
