"""Catalog transactions on SQLite: threads of one process queue for the write lock."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from knowbase.catalog.db import Catalog
from knowbase.errors import DatabaseBusy

pytestmark = pytest.mark.timeout(60)


def _counter_catalog(tmp_path: Path) -> Catalog:
    catalog = Catalog(f"sqlite:///{tmp_path / 'catalog.sqlite'}")
    with catalog.write_tx() as conn:
        conn.exec_driver_sql("CREATE TABLE counter (n INTEGER NOT NULL)")
        conn.exec_driver_sql("INSERT INTO counter VALUES (0)")
    return catalog


def test_concurrent_write_transactions_all_commit_one_at_a_time(tmp_path: Path) -> None:
    catalog = _counter_catalog(tmp_path)
    inside, most, errors = 0, 0, []
    guard = threading.Lock()

    def bump(times: int) -> None:
        nonlocal inside, most
        try:
            for _ in range(times):
                with catalog.write_tx() as conn:
                    with guard:
                        inside += 1
                        most = max(most, inside)
                    n = conn.exec_driver_sql("SELECT n FROM counter").scalar_one()
                    conn.exec_driver_sql("UPDATE counter SET n = ?", (n + 1,))
                    with guard:
                        inside -= 1
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=bump, args=(25,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert most == 1  # read-modify-write never interleaved: no update was lost
    with catalog.read() as conn:
        assert conn.exec_driver_sql("SELECT n FROM counter").scalar_one() == 200
    catalog.dispose()


def test_a_nested_write_transaction_fails_instead_of_hanging(tmp_path: Path) -> None:
    catalog = _counter_catalog(tmp_path)
    with (
        pytest.raises(DatabaseBusy, match="database is locked"),
        catalog.write_tx(),
        catalog.write_tx(),
    ):
        pass
    with catalog.write_tx() as conn:  # the lock was released on the way out
        conn.exec_driver_sql("UPDATE counter SET n = 1")
    catalog.dispose()
