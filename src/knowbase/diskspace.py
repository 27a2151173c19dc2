"""Recognising a full disk, whatever reported it (issue 26): an ``OSError`` with ``ENOSPC`` or
``EDQUOT``, SQLite's ``SQLITE_FULL`` (the ``sqlite3`` module's "database or disk is full", apsw's
``FullError``), PostgreSQL's ``disk_full``, or any of these wrapped by SQLAlchemy. Each edge
that writes maps it to :class:`~knowbase.errors.DiskFull` with :func:`as_disk_full`.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from knowbase.errors import DiskFull

#: errno values of a full disk or an exhausted quota.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: SQLite's message for SQLITE_FULL (sqlite3 module); apsw raises ``FullError``.
_SQLITE_FULL = "database or disk is full"
#: PostgreSQL's SQLSTATE class 53: insufficient resources (53100 disk_full).
_PG_DISK_FULL = "53100"
#: Below this many free bytes a file system counts as full for :func:`out_of_space`: SQLite
#: cannot even create a database's ``-shm`` (32 KiB) and first ``-wal`` frames there.
LOW_SPACE_BYTES = 1 << 20


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it wraps) says the disk or the quota is full."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DiskFull):
            return True
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return True
        module = type(exc).__module__ or ""
        if module.startswith("apsw") and type(exc).__name__ == "FullError":
            return True
        if module.startswith("psycopg") and getattr(exc, "sqlstate", None) == _PG_DISK_FULL:
            return True
        if _SQLITE_FULL in str(exc).lower():
            return True
        exc = getattr(exc, "orig", None) or exc.__cause__ or exc.__context__
    return False


def as_disk_full(exc: BaseException) -> DiskFull:
    """``exc`` as the DiskFull a caller sees (itself when it is one)."""
    if isinstance(exc, DiskFull):
        return exc
    inner = getattr(exc, "orig", None) or exc  # SQLAlchemy wraps the driver's error
    where = getattr(inner, "filename2", None) or getattr(inner, "filename", None)
    detail = f" writing {where}" if where else ""
    text = (getattr(inner, "strerror", None) or str(inner)).splitlines()[0]
    return DiskFull(f"no space left on the device{detail} ({text})")


def out_of_space(path: Path) -> bool:
    """Whether the file system holding ``path`` (or its nearest existing parent) has less than
    :data:`LOW_SPACE_BYTES` free for this user.

    SQLite reports a database it cannot open on a full disk as a generic I/O error (creating
    the ``-shm`` or ``-wal`` file fails with ENOSPC, which SQLite does not pass on), so a
    caller that is about to call an open error damage asks this first. ``statvfs`` holds no
    descriptor of the file: it is safe beside live connections (DESIGN, turn 4).
    """
    probe = path
    while True:
        try:
            st = os.statvfs(probe)
        except OSError:
            if probe.parent == probe:
                return False
            probe = probe.parent
            continue
        return st.f_bavail * st.f_frsize < LOW_SPACE_BYTES


__all__ = ["DISK_FULL_ERRNOS", "LOW_SPACE_BYTES", "as_disk_full", "is_disk_full", "out_of_space"]
