"""Is an embedded home's ``catalog.sqlite`` the catalog it should be? (DESIGN "Turn 3
decisions": nothing is recreated where something was expected.)

A home is *fresh* when it has no catalog file (or an empty one) and no base folders: the
catalog is created as always. Anything else must be a knowbase catalog that answers:

- missing or empty while ``bases/`` holds base folders → unavailable (creating a new catalog
  would leave every base on disk with nothing to adopt it);
- not a SQLite file, truncated, or a page that cannot be read → unavailable;
- a SQLite file without the catalog's tables while base folders exist → unavailable.

:func:`check_sqlite_catalog` reads the file's header and asks a fresh connection (never the
pool's, whose page cache can hide a file damaged under a running process); ``thorough`` also
walks the base and item tables (what ``/status`` does, a few ms per 100k items).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from knowbase.errors import CatalogUnavailable
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
) -> CatalogUnavailable | None:
    """The reason the catalog at ``path`` cannot be used (an error to raise or report), or
    None when it is usable or the home is fresh."""
    folders = base_folders(bases_dir)
    problem = header_problem(path)
    if problem in ("is missing", "is empty (0 bytes)"):
        if not folders:
            return None  # a fresh home: the catalog is created as always
        problem += f", but {bases_dir} holds {len(folders)} base folder(s)"
    elif problem is None:
        problem = _query_problem(path, bool(folders), thorough)
    if problem is None:
        return None
    return CatalogUnavailable(
        f"the catalog {path} {problem}; it is not recreated empty",
        hint=recovery_hint(path),
        path=str(path),
        base_folders=len(folders),
    )


def _query_problem(path: Path, has_folders: bool, thorough: bool) -> str | None:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=5)
    except sqlite3.Error as exc:
        return f"cannot be opened ({exc})"
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
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):
            return None  # a writer holds it: busy, not damaged
        return f"cannot be read ({exc})"
    except sqlite3.DatabaseError as exc:
        return f"is damaged ({exc})"
    finally:
        conn.close()
    return None


__all__ = ["base_folders", "check_sqlite_catalog", "recovery_hint"]
