"""SQLite files on disk: what one must look like before knowbase opens it, and the rule that a
live one is SQLite's alone (DESIGN "Turn 3 decisions": nothing is recreated where something was
expected; "Turn 4 decisions": a live SQLite file is SQLite's alone).

SQLite turns a zero-length file into a fresh empty database at the first write, and opening
a file of random bytes fails only at the first query. Both the catalog and the per-base index
read the file's header first, so that a damaged file is reported with its reason instead of
being silently replaced (zero bytes) or failing later with a driver error (random bytes).

Reading that header is safe only before this process opens the file with SQLite. On POSIX,
closing *any* descriptor of a file drops every ``fcntl`` lock the process holds on it; SQLite
then no longer counts this process's connections, the next process to close its last
connection checkpoints and deletes the WAL under them, and every write this process makes
afterwards goes to a deleted file (issue 37; sqlite.org "How To Corrupt An SQLite Database
File" §2.2). So every SQLite connection is announced here first (:func:`opening`), and
:func:`header_problem` does not touch a file this process has opened: from then on the
health of that file is SQLite's to report (``PRAGMA quick_check``, the error codes of real
queries). SQLite's own second connection to a file is safe: within one SQLite library it
keeps a descriptor open until the process's last lock on that file is released.

    >>> header_problem(Path("catalog.sqlite"))  # doctest: +SKIP
    'is empty (0 bytes)'
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

#: The first 16 bytes of every SQLite 3 database file (https://sqlite.org/fileformat.html).
MAGIC = b"SQLite format 3\x00"
HEADER_BYTES = 100

# Held while a header is read and while a connection is announced: a connection opened while
# another thread reads the header would otherwise lose its first lock to that read's close().
_registry_lock = threading.Lock()
_opened: set[str] = set()


def _key(path: Path | str) -> str:
    return os.path.realpath(path)


def opening(path: Path | str) -> None:
    """Announce that this process opens (or may open) ``path`` with SQLite now; call it before
    the connection is made. From here on no header check reads the file in this process."""
    with _registry_lock:
        _opened.add(_key(path))


def is_open_here(path: Path | str) -> bool:
    """Whether this process has announced a SQLite connection to ``path``."""
    with _registry_lock:
        return _key(path) in _opened


def header_problem(path: Path) -> str | None:
    """Why ``path`` is not a usable SQLite database, judged by its header; None when it looks
    like one (a missing file's reason is ``is missing``).

    The header is read only before this process's first SQLite connection to ``path``: once
    one was announced (:func:`opening`) only ``stat`` looks at the file here (missing, empty),
    and SQLite itself reports a damaged file."""
    with _registry_lock:
        if _key(path) in _opened:
            return _stat_problem(path)
        return _read_header_problem(path)


def _stat_problem(path: Path) -> str | None:
    try:
        size = os.stat(path).st_size  # no descriptor: no lock of this process is dropped
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return "is empty (0 bytes)" if size == 0 else None


def _read_header_problem(path: Path) -> str | None:
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


__all__ = ["MAGIC", "header_problem", "is_open_here", "opening"]
