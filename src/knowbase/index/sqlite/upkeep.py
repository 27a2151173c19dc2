"""The SQLite store's upkeep: best-effort space reclaim (§3 "Reclaim") and the integrity check
(``kb doctor``). Module functions on a connection; the store holds the lease around them."""

from __future__ import annotations

import logging
from pathlib import Path

import apsw

log = logging.getLogger(__name__)

RECLAIM_MIN_RATIO = 0.2
RECLAIM_MIN_BYTES = 8 << 20


def reclaim(conn: apsw.Connection, path: Path, *, min_ratio: float, min_bytes: int) -> None:
    """Checkpoint; only when the free list is ≥ ``min_ratio`` of the pages **and** ≥
    ``min_bytes``, FTS ``optimize``, checkpoint, VACUUM, checkpoint. Never raises."""
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        free = conn.execute("PRAGMA freelist_count").fetchall()[0][0]
        pages = conn.execute("PRAGMA page_count").fetchall()[0][0]
        size = conn.execute("PRAGMA page_size").fetchall()[0][0]
        if not pages or free / pages < min_ratio or free * size < min_bytes:
            return
        conn.execute("INSERT INTO search_text_fts(search_text_fts) VALUES ('optimize')")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        log.info("reclaimed %d free pages in %s", free, path)
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        log.error("reclaim of %s found a corrupt index: %s", path, exc)
    except Exception as exc:  # best effort by contract
        log.warning("reclaim of %s failed: %s", path, exc)


def integrity_problems(conn: apsw.Connection) -> list[str]:
    """What SQLite's and FTS5's integrity checks (and the FTS row sync) find on ``conn``
    (a fresh connection: FTS5's check on a long-lived reader can see a stale structure
    record after many rebuilds and report a false "corruption found")."""
    problems: list[str] = []
    rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    if rows != ["ok"]:
        problems.extend(rows)
    try:
        conn.execute(
            "INSERT INTO search_text_fts(search_text_fts, rank) VALUES ('integrity-check', 0)"
        )
    except apsw.Error as exc:
        problems.append(f"fts: {exc}")
    fts = {r[0] for r in conn.execute("SELECT rowid FROM search_text_fts")}
    st = {r[0] for r in conn.execute("SELECT fts_rowid FROM search_text")}
    if fts != st:
        problems.append(f"fts rows out of sync: {len(fts ^ st)} differ")
    return problems
