"""SQLite's faults, named for what they are (DESIGN "Turn 4 decisions": faults are named).

A busy lock, an I/O error, a full disk, a file that cannot be opened and real corruption need
different advice. Only corruption that an integrity check confirms may be called damaged (its
callers check: the catalog in :mod:`knowbase.catalog.integrity`, an index in its store); the rest
become :class:`~knowbase.errors.DatabaseBusy`, :class:`~knowbase.errors.DatabaseIOError`,
:class:`~knowbase.errors.DiskFull` and :class:`~knowbase.errors.DatabaseCannotOpen`, each naming
the file.

    >>> kind_of(10)
    'io'
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Literal

from knowbase.errors import (
    DatabaseBusy,
    DatabaseCannotOpen,
    DatabaseIOError,
    DiskFull,
    KnowbaseError,
)

Kind = Literal["busy", "io", "full", "cannot_open", "corrupt"]

#: SQLite's primary result codes (https://sqlite.org/rescode.html) and what each one is.
_KINDS: dict[int, Kind] = {
    5: "busy",  # SQLITE_BUSY
    6: "busy",  # SQLITE_LOCKED
    10: "io",  # SQLITE_IOERR
    11: "corrupt",  # SQLITE_CORRUPT
    13: "full",  # SQLITE_FULL
    14: "cannot_open",  # SQLITE_CANTOPEN
    26: "corrupt",  # SQLITE_NOTADB
}


def kind_of(result_code: int | None) -> Kind | None:
    """What a SQLite (primary or extended) result code means, or None for any other error."""
    if result_code is None:
        return None
    return _KINDS.get(result_code & 0xFF)


def errno_hint(path: Path) -> str:
    """What the file system says of ``path`` now, read without opening it (``stat`` and
    ``access`` hold no descriptor, so no lock of this process is dropped)."""
    for probe in (path, path.parent):
        try:
            os.stat(probe)
        except OSError as exc:
            name = errno.errorcode.get(exc.errno or 0, "")
            return f"errno {exc.errno} {name}: {exc.strerror} ({probe})"
    if not os.access(path, os.R_OK | os.W_OK):
        return f"errno {errno.EACCES} EACCES: this user may not read and write {path}"
    return "SQLite gave no errno; the file is present and writable now"


def fault_error(kind: Kind, path: Path, detail: str, what: str) -> KnowbaseError:
    """The error a caller sees for a fault of ``kind`` on ``path`` (``what``: "catalog" or "index
    of base X"); ``detail`` is SQLite's own text and extended code. Corruption is not decided
    here: callers confirm it with an integrity check first."""
    where = {"path": str(path), "sqlite_error": detail}
    if kind == "busy":
        return DatabaseBusy(f"the {what} ({path}) is busy: {detail}", **where)
    if kind == "full":
        return DiskFull(f"no space left for the {what} ({path}): {detail}", **where)
    if kind == "cannot_open":
        return DatabaseCannotOpen(
            f"the {what} ({path}) cannot be opened: {detail}; {errno_hint(path)}", **where
        )
    return DatabaseIOError(
        f"I/O error on the {what} ({path}): {detail}; {errno_hint(path)}",
        transient=True,
        **where,
    )


__all__ = ["Kind", "errno_hint", "fault_error", "kind_of"]
