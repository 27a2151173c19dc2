"""PostgreSQL write safety under READ COMMITTED: real interleavings on the embedded server.

- a status write that races a delete never moves the row out of ``deleting`` (the guard is in
  the ``UPDATE … WHERE``, re-checked by PostgreSQL on the row version the delete committed);
- the recovery sweep neither fails an item added while it runs nor one whose job finished
  between its two reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base
from knowbase.service import Knowledge
from knowbase.settings import Settings

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def kb(tmp_path: Path, pg_url: str) -> Iterator[Knowledge]:
    knowledge = Knowledge(
        Settings(home=tmp_path / "home", database_url=pg_url, test_providers=True)
    )
    try:
        yield knowledge
    finally:
        knowledge.close()


@pytest.fixture
def base(kb: Knowledge) -> Base:
    return kb.create_base("b", file_processor_id=None)


def _status(kb: Knowledge, item_id: str) -> str:
    with kb.rt.catalog.read() as conn:
        return conn.execute(
            sa.text("SELECT status FROM knowledge_item WHERE id = :i"), {"i": item_id}
        ).scalar_one()


def _blocked_on_a_lock(kb: Knowledge) -> bool:
    with kb.rt.catalog.read() as conn:
        return bool(
            conn.execute(
                sa.text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            ).scalar()
        )


WRITES: dict[str, Callable[..., object]] = {
    "set_status": lambda conn, i: item_repo.set_status(conn, i, "completed"),
    "fail_items": lambda conn, i: item_repo.fail_items(conn, [i], "x_failed", "x"),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_status_write_racing_a_delete_keeps_deleting(
    kb: Knowledge, base: Base, write: str
) -> None:
    item = kb.add_note(base.id, "Racing notes.", wait=False)
    assert _status(kb, item.id) in ("preparing", "processing")
    deleter = kb.rt.catalog.engine.connect()
    tx = deleter.begin()
    item_repo.mark_deleting(deleter, [item.id])  # row locked, not yet committed
    result: list[object] = []

    def writer() -> None:  # reads the old version, then waits on the row lock
        with kb.rt.catalog.write_tx() as conn:
            result.append(WRITES[write](conn, item.id))

    thread = threading.Thread(target=writer)
    thread.start()
    deadline = time.monotonic() + 10
    while not _blocked_on_a_lock(kb) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _blocked_on_a_lock(kb)
    tx.commit()
    deleter.close()
    thread.join(10)
    assert _status(kb, item.id) == "deleting"  # before: completed / failed over deleting
    assert result in ([False], [[]])


def test_sweep_leaves_an_item_added_while_it_reads(kb: Knowledge, base: Base, monkeypatch) -> None:
    from knowbase.operations import recovery

    kb.add_note(base.id, "Already queued.", wait=False)  # something active: the sweep reads jobs
    real = recovery._covered_ids
    late: list[str] = []

    def covered_ids(rt):  # type: ignore[no-untyped-def]
        covered = real(rt)
        if not late:  # an add commits its item and its job right after the jobs were read
            late.append(kb.add_note(base.id, "Added during the sweep.", wait=False).id)
        return covered

    monkeypatch.setattr(recovery, "_covered_ids", covered_ids)
    report = kb.recover()
    assert late and late[0] not in report.interrupted
    assert _status(kb, late[0]) in ("preparing", "processing")


def test_sweep_leaves_an_item_whose_job_finished_between_its_reads(
    kb: Knowledge, base: Base, monkeypatch
) -> None:
    from knowbase.operations import recovery

    item = kb.add_note(base.id, "Finished during the sweep.", wait=False)
    real = recovery._covered_ids
    ran: list[bool] = []

    def covered_ids(rt):  # type: ignore[no-untyped-def]
        if not ran:  # the sweep's read of active jobs
            ran.append(True)
            kb.run_until_idle(timeout_s=60)  # the job ends: the item is completed now
        return real(rt)

    monkeypatch.setattr(recovery, "_covered_ids", covered_ids)
    report = kb.recover()
    assert ran
    assert item.id not in report.interrupted
    # the items-first order's own risk, closed by the guarded UPDATE (only_statuses)
    assert _status(kb, item.id) == "completed"
