"""What a SQLite file on disk must look like before knowbase opens it (DESIGN "Turn 3
decisions": nothing is recreated where something was expected).

SQLite turns a zero-length file into a fresh empty database at the first write, and opening
a file of random bytes fails only at the first query. Both the catalog and the per-base index
read the file's header first, so that a damaged file is reported with its reason instead of
being silently replaced (zero bytes) or failing later with a driver error (random bytes).

    >>> header_problem(Path("catalog.sqlite"))  # doctest: +SKIP
    'is empty (0 bytes)'
"""

from __future__ import annotations

from pathlib import Path

#: The first 16 bytes of every SQLite 3 database file (https://sqlite.org/fileformat.html).
MAGIC = b"SQLite format 3\x00"
HEADER_BYTES = 100


def header_problem(path: Path) -> str | None:
    """Why ``path`` is not a usable SQLite database, judged by its header; None when it looks
    like one (a missing file's reason is ``is missing``)."""
    try:
        with open(path, "rb") as fh:
            header = fh.read(HEADER_BYTES)
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not header:
        return "is empty (0 bytes)"
    if not header.startswith(MAGIC):
        return "is not a SQLite database (its header is damaged or it holds other data)"
    if len(header) < HEADER_BYTES:
        return f"is truncated ({len(header)} bytes)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        return "is not a SQLite database (its header names no valid page size)"
    size = path.stat().st_size
    if size % page_size:
        return f"is truncated ({size} bytes is not a whole number of {page_size}-byte pages)"
    return None


__all__ = ["MAGIC", "header_problem"]
