"""Recognising a full disk, whatever reported it (issue 26): an ``OSError`` with ``ENOSPC`` or
``EDQUOT``, SQLite's ``SQLITE_FULL`` (the ``sqlite3`` module's "database or disk is full", apsw's
``FullError``), PostgreSQL's ``disk_full``, or any of these wrapped by SQLAlchemy. Each edge
that writes maps it to :class:`~knowbase.errors.DiskFull` with :func:`as_disk_full`.
"""

from __future__ import annotations

import errno

from knowbase.errors import DiskFull

#: errno values of a full disk or an exhausted quota.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: SQLite's message for SQLITE_FULL (sqlite3 module); apsw raises ``FullError``.
_SQLITE_FULL = "database or disk is full"
#: PostgreSQL's SQLSTATE class 53: insufficient resources (53100 disk_full).
_PG_DISK_FULL = "53100"


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


__all__ = ["DISK_FULL_ERRNOS", "as_disk_full", "is_disk_full"]
