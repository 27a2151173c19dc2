"""Small pieces every part of the SQLite store shares: the apsw → :mod:`knowbase.errors`
mapping (this edge only), the file check before opening, hit and unit rows, batching and the
material scope as SQL."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import apsw

from knowbase.errors import (
    DiskFull,
    InvalidInput,
    KnowbaseError,
    Unavailable,
    VectorStoreUnavailable,
)
from knowbase.index.base import SearchHit, UnitRecord
from knowbase.index.sqlite.schema import RECOVER_HINT, connect, prepare
from knowbase.sqlite_faults import fault_error
from knowbase.sqlite_files import header_problem

BATCH = 500  # coverage checks and IN lists, as §3

HIT_COLUMNS = """su.unit_id, su.material_id, m.relative_path, su.unit_index, su.char_start,
  su.char_end, st.text, su.title, su.locator_json"""
HIT_JOINS = """JOIN search_unit su ON su.unit_id = st.target_id AND st.target_type = 'search_unit'
  JOIN material m ON m.material_id = su.material_id"""


def map_error(exc: apsw.Error, op: str, path: Path) -> KnowbaseError:
    """One place that turns apsw's exceptions into ours.

    A ``CantOpenError``/``IOError`` is a :class:`~knowbase.errors.DatabaseCannotOpen` /
    :class:`~knowbase.errors.DatabaseIOError` marked ``transient``: a file briefly out of reach
    (a network mount reconnecting, a ``-wal`` file in the way) opens on a later try, so the
    runtime retries; it never fails the base (only damage does).
    """
    details: dict[str, Any] = {"op": op, "path": str(path), "sqlite_error": type(exc).__name__}
    if isinstance(exc, apsw.CantOpenError | apsw.IOError):
        # An I/O or open fault is not damage: named as such, never "restore the base".
        kind = "cannot_open" if isinstance(exc, apsw.CantOpenError) else "io"
        fault = fault_error(kind, path, f"{exc} ({op})", "base's index")
        fault.details.update(op=op, transient=True)
        return fault
    if isinstance(exc, apsw.FullError):
        return DiskFull(f"no space left for the index ({op}): {exc}", **details)
    if isinstance(exc, apsw.BusyError | apsw.LockedError):
        return Unavailable(f"index is busy ({op}); retry shortly", **details)
    if isinstance(exc, apsw.CorruptError | apsw.NotADBError):
        return VectorStoreUnavailable(
            f"index file cannot be used ({op}): {exc}",
            hint=RECOVER_HINT,
            **details,
        )
    if isinstance(exc, apsw.ConstraintError):
        return InvalidInput(f"index constraint failed ({op}): {exc}", **details)
    return KnowbaseError(f"index error ({op}): {exc}", **details)


def check_file(path: Path, base_id: str) -> None:
    """Refuse an index file that is missing, empty or no SQLite database before SQLite opens it
    (SQLite would make an empty file a fresh, empty index). Missing and empty are marked
    ``transient``: a base being created in another process has its file for a moment before
    its schema, and the runtime's retries outlast that."""
    problem = header_problem(path)
    if problem is None:
        return
    transient = {"transient": True} if problem in ("is missing", "is empty (0 bytes)") else {}
    raise VectorStoreUnavailable(
        f"the base's index file {problem}; it is not recreated empty",
        hint=RECOVER_HINT,
        path=str(path),
        base_id=base_id,
        **transient,
    )


def open_connection(
    path: Path, base_id: str, model_id: str | None, *, create: bool
) -> tuple[apsw.Connection, bool, str]:
    """The writer connection on a checked (or, when ``create``, created) file with its schema
    prepared: ``(conn, was_reset, created_at)``. apsw's errors come out mapped; the connection
    is closed on any failure."""
    if not create:
        check_file(path, base_id)
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    conn = None
    try:
        conn = connect(path, create=create)
        was_reset, created_at = prepare(conn, base_id, model_id, create=create)
    except apsw.Error as exc:
        if conn is not None:
            conn.close()
        raise map_error(exc, "open", path) from exc
    except BaseException:
        if conn is not None:
            conn.close()
        raise
    return conn, was_reset, created_at


def hit(row: Sequence[Any], score: float) -> SearchHit:
    uid, mid, path, idx, start, end, text, title, loc = row
    locator = json.loads(loc) if loc else {}
    return SearchHit(uid, mid, path, idx, start, end, text, score, title, locator)


def hits(conn: apsw.Connection, pairs: Sequence[tuple[str, float]]) -> list[SearchHit]:
    """Full hits for ``(unit_id, score)`` pairs of either lane, in their order; units gone
    meanwhile are skipped."""
    found: dict[str, Sequence[Any]] = {}
    for batch in batches([uid for uid, _ in pairs]):
        for r in conn.execute(
            f"SELECT {HIT_COLUMNS} FROM search_text st {HIT_JOINS}"
            f" WHERE st.kind = 'body' AND su.unit_id IN ({marks(len(batch))})",
            tuple(batch),
        ):
            found[r[0]] = r
    return [hit(found[uid], score) for uid, score in pairs if uid in found]


def unit_records(conn: apsw.Connection, material_id: str) -> list[UnitRecord]:
    """The material's units in unit_index order, with their bodies."""
    rows = conn.execute(
        # CROSS JOIN keeps search_unit (by material_id) the outer loop: left to itself the
        # planner walked search_text's kind index, every row of the base (0.23 s per call at
        # 100k chunks; now 0.1 ms).
        "SELECT su.unit_id, su.unit_index, su.char_start, su.char_end, st.text,"
        " su.locator_json FROM search_unit su CROSS JOIN search_text st"
        " ON st.target_type = 'search_unit' AND st.target_id = su.unit_id"
        " AND st.kind = 'body' WHERE su.material_id = ? ORDER BY su.unit_index",
        (material_id,),
    ).fetchall()
    return [
        UnitRecord(uid, idx, s, e, text, json.loads(loc) if loc else {})
        for uid, idx, s, e, text, loc in rows
    ]


def first(cursor: apsw.Cursor) -> Any:
    """The first row or None, draining the cursor: a pending statement pins a read snapshot
    (WAL) and blocks DROP TABLE on its connection."""
    rows = cursor.fetchall()
    return rows[0] if rows else None


def batches(items: Sequence[str], size: int = BATCH) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def marks(n: int) -> str:
    return ",".join("?" * n)


class Within:
    """A material scope as SQL: ``sql`` (empty, or an ``AND`` on ``su.material_id``) and its
    ``args``. The ids travel as one JSON array (``json_each``): one parameter however many."""

    __slots__ = ("args", "sql")

    def __init__(self, within: frozenset[str] | None) -> None:
        if within is None:
            self.sql, self.args = "", ()
        else:
            self.sql = " AND su.material_id IN (SELECT value FROM json_each(?))"
            self.args = (json.dumps(list(within)),)
