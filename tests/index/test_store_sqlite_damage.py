"""An index file that was expected is never recreated empty (issue 26 item 1): a zero-length
file, one without its ``meta`` row or tables, random bytes or a truncated file is refused with
the reason and the recovery command, and left exactly as it was. A new base still creates its
file."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from knowbase.errors import VectorStoreUnavailable
from knowbase.index.base import MaterialInput
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.units.chunk import Chunk

BASE = "base-1"


def _filled(path: Path) -> None:
    store = SqliteIndexStore.open(path, base_id=BASE, dims=None, create=True)
    text = "otters hold hands while they sleep"
    chunks = [Chunk(text, 0, len(text), 0)]
    store.rebuild_material(MaterialInput("m1", "otters.md", text, chunks), {})
    store.close()
    for extra in path.parent.glob(path.name + "-*"):
        extra.unlink()  # checkpointed on close; no -wal may keep the old pages


def _tables(path: Path) -> set[str]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()


def _refused(path: Path, reason: str) -> None:
    with pytest.raises(VectorStoreUnavailable, match=reason) as err:
        SqliteIndexStore.open(path, base_id=BASE, dims=None, create=False)
    assert "kb base restore" in (err.value.hint or "")


def test_a_new_index_is_created(tmp_path: Path) -> None:
    path = tmp_path / ".kb" / "index.sqlite"
    SqliteIndexStore.open(path, base_id=BASE, dims=None, create=True).close()
    store = SqliteIndexStore.open(path, base_id=BASE, dims=None, create=False)
    assert store.changes_version() == 0
    store.close()


def test_a_zero_length_index_is_not_recreated(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    _filled(path)
    path.write_bytes(b"")
    _refused(path, "is empty")
    assert path.stat().st_size == 0


def test_an_index_without_its_meta_row_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    _filled(path)
    conn = apsw.Connection(str(path))
    conn.execute("DELETE FROM meta")
    conn.close()
    _refused(path, "lost its meta row")
    conn = apsw.Connection(str(path))
    assert conn.execute("SELECT count(*) FROM meta").fetchall() == [(0,)]  # no new meta row
    assert conn.execute("SELECT count(*) FROM material").fetchall() == [(1,)]
    conn.close()


def test_an_empty_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA user_version = 1")  # a valid database without a single table
    conn.close()
    _refused(path, "holds no index")
    assert _tables(path) == set()  # no schema was created in it


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        # The header names it in a process that never opened the file; here the file was
        # opened before (``_filled``), so SQLite's own verdict names it (knowbase.sqlite_files).
        (lambda data: b"\x8f" * len(data), "not a SQLite database|file is not a database"),
        (lambda data: data[: len(data) // 2 + 100], "truncated|malformed"),
    ],
    ids=["random-bytes", "truncated"],
)
def test_damaged_bytes_are_refused(tmp_path: Path, damage, reason: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "index.sqlite"
    _filled(path)
    damaged = damage(path.read_bytes())
    path.write_bytes(damaged)
    _refused(path, reason)
    assert path.read_bytes() == damaged
