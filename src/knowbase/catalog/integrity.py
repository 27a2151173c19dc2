"""Is an embedded home's ``catalog.sqlite`` the catalog it should be? (DESIGN "Turn 3
decisions": nothing is recreated where something was expected.)

A home is *fresh* when it has no catalog file (or an empty one) and no base folders: the
catalog is created as always. Anything else must be a knowbase catalog that answers:

- missing or empty while ``bases/`` holds base folders → unavailable (creating a new catalog
  would leave every base on disk with nothing to adopt it);
- not a SQLite file, truncated, or a page that cannot be read → unavailable;
- a SQLite file without the catalog's tables while base folders exist → unavailable.

:func:`check_sqlite_catalog` runs when a process opens its catalog: it reads the file's header
(only before the process's first connection: :mod:`knowbase.sqlite_files`) and asks SQLite.
A running process asks only SQLite (:func:`query_problem` over a pooled connection, with
``PRAGMA quick_check`` on a schedule). "Damaged" is said only when SQLite's integrity check
fails; busy, I/O and open faults are named for what they are (:mod:`knowbase.sqlite_faults`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from knowbase import sqlite_files
from knowbase.errors import CatalogUnavailable, DatabaseBusy, KnowbaseError
from knowbase.sqlite_faults import fault_error, kind_of
from knowbase.sqlite_files import header_problem

_TABLES = ("knowledge_base", "knowledge_item", "job", "alembic_version")


def base_folders(bases_dir: Path) -> list[str]:
    """Names of the folders under ``bases_dir`` that hold a base (its ``.kb`` or ``raw``)."""
    try:
        entries = list(bases_dir.iterdir())
    except OSError:
        return []
    return sorted(
        e.name for e in entries if e.is_dir() and ((e / ".kb").is_dir() or (e / "raw").is_dir())
    )


def recovery_hint(path: Path) -> str:
    home = path.parent
    return (
        f"stop every kb process, then put back {path.name} from a backup (with its -wal file, "
        f"if any); to start over instead, move {home} aside — the bases' files under "
        f"{home / 'bases'} are untouched and kb never writes a new catalog over them"
    )


def check_sqlite_catalog(
    path: Path, bases_dir: Path, *, thorough: bool = False
) -> KnowbaseError | None:
    """The reason the catalog at ``path`` cannot be used (an error to raise or report), or
    None when it is usable or the home is fresh. Damage and a missing catalog are
    :class:`CatalogUnavailable`; an I/O or open fault is named as such
    (:mod:`knowbase.sqlite_faults`).

    The header is read only before this process's first connection to the file (see
    :mod:`knowbase.sqlite_files`); afterwards only SQLite looks at it."""
    folders = base_folders(bases_dir)
    problem = header_problem(path)
    if problem in ("is missing", "is empty (0 bytes)"):
        if not folders:
            return None  # a fresh home: the catalog is created as always
        problem += f", but {bases_dir} holds {len(folders)} base folder(s)"
    elif problem is None:
        sqlite_files.opening(path)
        try:
            conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=5)
        except sqlite3.Error as exc:
            fault = _driver_fault(exc, path)
            return fault or _unavailable(path, f"cannot be opened ({exc})", folders)
        try:
            problem_or_fault = query_problem(conn, path, bool(folders), thorough=thorough)
        finally:
            conn.close()
        if not isinstance(problem_or_fault, str):
            return problem_or_fault
        problem = problem_or_fault
    if problem is None:
        return None
    return _unavailable(path, problem, folders)


def _unavailable(path: Path, problem: str, folders: list[str]) -> CatalogUnavailable:
    return CatalogUnavailable(
        f"the catalog {path} {problem}; it is not recreated empty",
        hint=recovery_hint(path),
        path=str(path),
        base_folders=len(folders),
    )


def _driver_fault(exc: BaseException, path: Path) -> KnowbaseError | None:
    """A busy, I/O, full-disk or cannot-open fault named as such; None for anything else."""
    code = getattr(exc, "sqlite_errorcode", None)
    kind = kind_of(code)
    if kind is None or kind == "corrupt":
        return None
    name = getattr(exc, "sqlite_errorname", None) or f"code {code}"
    return fault_error(kind, path, f"{exc} [{name}]", "catalog")


def query_problem(
    conn: Any, path: Path, has_folders: bool, *, thorough: bool = False, quick_check: bool = False
) -> str | KnowbaseError | None:
    """Ask SQLite, over the DB-API connection ``conn``, whether the catalog is whole: a reason
    (text) it is not a usable catalog, a named fault (busy, I/O…) that stopped the asking, or
    None. ``quick_check`` runs ``PRAGMA quick_check`` too (O(pages): for a schedule, not per
    request)."""
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = [t for t in _TABLES if t not in names]
        if not names:
            # A valid, empty database: what SQLite leaves after a first open that wrote nothing.
            return "holds no catalog, but base folders exist" if has_folders else None
        if missing:
            return f"is not a knowbase catalog (missing tables: {', '.join(missing)})"
        if conn.execute("SELECT count(*) FROM alembic_version").fetchone()[0] != 1:
            return "has lost its schema revision (alembic_version)"
        if thorough:
            for table in ("knowledge_base", "knowledge_item", "job"):
                conn.execute(f"SELECT count(*) FROM {table}").fetchone()  # noqa: S608
        else:
            conn.execute("SELECT id FROM knowledge_base LIMIT 1").fetchall()
        if quick_check:
            return integrity_problem(conn)
    except sqlite3.Error as exc:
        fault = _driver_fault(exc, path)
        if fault is not None:
            return None if isinstance(fault, DatabaseBusy) else fault  # busy: not damaged
        # SQLite says corrupt: believe it only when its integrity check agrees.
        return integrity_problem(conn) or None
    return None


def integrity_problem(conn: Any) -> str | None:
    """``PRAGMA quick_check`` over ``conn``: why the file is damaged, or None when it passes."""
    try:
        rows = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.Error as exc:
        if kind_of(getattr(exc, "sqlite_errorcode", None)) == "corrupt":
            return f"is damaged ({exc})"
        return None  # busy or I/O: no verdict on the file's contents
    if rows == ["ok"]:
        return None
    return f"is damaged (integrity check: {'; '.join(rows[:3])})"


__all__ = [
    "base_folders",
    "check_sqlite_catalog",
    "integrity_problem",
    "query_problem",
    "recovery_hint",
]
