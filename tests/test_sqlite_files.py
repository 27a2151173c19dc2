"""A live SQLite file is SQLite's alone (issue 37, DESIGN "Turn 4 decisions").

The property under test is the one the server lost: while this process holds a connection to a
database in WAL mode, another process that opens and closes the database must not delete the
WAL under it. Reading the file's header with the OS (``open()`` then ``close()``) drops this
process's locks and lets exactly that happen; :func:`header_problem` must not do it once a
connection was announced.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from knowbase import sqlite_files


def _live_connection(db: Path) -> sqlite3.Connection:
    sqlite_files.opening(db)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    return conn


def _another_process_opens_and_closes(db: Path) -> None:
    code = (
        f"import sqlite3; c = sqlite3.connect({str(db)!r}); c.execute('SELECT * FROM t'); c.close()"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_header_check_after_a_connection_leaves_its_locks(tmp_path: Path) -> None:
    db = tmp_path / "live.sqlite"
    conn = _live_connection(db)
    assert sqlite_files.header_problem(db) is None
    _another_process_opens_and_closes(db)
    assert (tmp_path / "live.sqlite-wal").exists()  # still ours: the other was not the last
    conn.execute("INSERT INTO t VALUES (2)")
    conn.close()
    reopened = sqlite3.connect(db)
    assert reopened.execute("SELECT count(*) FROM t").fetchone() == (2,)
    reopened.close()


def test_an_os_read_of_a_live_file_is_what_loses_the_wal(tmp_path: Path) -> None:
    """The failure the rule prevents, shown on the raw header read: the check above can fail."""
    db = tmp_path / "live.sqlite"
    conn = _live_connection(db)
    assert sqlite_files._read_header_problem(db) is None  # open() + close(): locks dropped
    _another_process_opens_and_closes(db)
    assert not (tmp_path / "live.sqlite-wal").exists()  # deleted under the live connection
    conn.close()


def test_the_header_is_read_before_the_first_connection(tmp_path: Path) -> None:
    db = tmp_path / "never-opened.sqlite"
    db.write_bytes(b"not a database at all" * 10)
    assert "not a SQLite database" in (sqlite_files.header_problem(db) or "")
    sqlite_files.opening(db)
    assert sqlite_files.header_problem(db) is None  # SQLite's to judge from here on
    db.write_bytes(b"")
    assert sqlite_files.header_problem(db) == "is empty (0 bytes)"  # stat still sees that
    db.unlink()
    assert sqlite_files.header_problem(db) == "is missing"
