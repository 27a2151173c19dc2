"""The change feed on a real PostgreSQL 18: NOTIFY at commit, heard by another "process"
(a second Catalog with its own engine and LISTEN connection), and the event stream's reads."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from knowbase.catalog import items as item_repo
from knowbase.catalog.db import Catalog
from knowbase.catalog.schema import worker as worker_t
from knowbase.interfaces.http import events as http_events
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
def other(pg_url: str) -> Iterator[Catalog]:
    """Another process's catalog: its writes reach ``kb`` only through PostgreSQL."""
    catalog = Catalog(pg_url)
    try:
        yield catalog
    finally:
        catalog.dispose()


def listening(kb: Knowledge) -> int:
    """Start the LISTEN connection and wait until it is up; the publications so far."""
    kb.activity.changes.start()
    assert kb.activity.changes.watching.wait(20), "LISTEN never started"
    return kb.activity.changes.seq


def test_a_commit_elsewhere_is_heard_with_its_floor(kb: Knowledge, other: Catalog) -> None:
    base = kb.create_base("pg-feed", file_processor_id=None)
    seen = listening(kb)
    before = int(time.time() * 1000)
    with other.write_tx() as conn:
        item = item_repo.insert_active(conn, base_id=base.id, type="note", data={})
    got = kb.activity.changes.wait(seen, 10)
    assert got > seen
    floor = kb.activity.changes.floor_since(seen)
    assert floor is not None and before - 1_000 <= floor <= item.updated_at


def test_writes_a_stream_does_not_show_wake_nobody(kb: Knowledge, other: Catalog) -> None:
    seen = listening(kb)
    with other.write_tx() as conn:  # a worker heartbeat row
        conn.execute(
            sa.insert(worker_t).values(id="w", host="h", pid=1, started_at=0, heartbeat_at=0)
        )
    with other.write_tx() as conn:  # a read-only transaction
        conn.execute(sa.text("SELECT 1"))
    assert kb.activity.changes.wait(seen, 1.0) == seen


def test_the_stream_reads_a_change_made_elsewhere(kb: Knowledge, other: Catalog) -> None:
    base = kb.create_base("pg-stream", file_processor_id=None)
    with kb.rt.catalog.write_tx() as conn:
        first = item_repo.insert_active(conn, base_id=base.id, type="note", data={})
    cursor = http_events.Cursor(base.id)
    listening(kb)
    assert [d["id"] for _, d in http_events.first_read(kb, cursor)] == [first.id]
    seen = cursor.seq
    with other.write_tx() as conn:
        item_repo.set_status(conn, first.id, "completed")
        second = item_repo.insert_active(conn, base_id=base.id, type="note", data={})
    with other.write_tx() as conn:
        item_repo.delete_rows(conn, [first.id])
    deadline = time.monotonic() + 10
    events: list = []
    while time.monotonic() < deadline and len(events) < 2:
        kb.activity.changes.wait(seen, 1.0)
        seen = kb.activity.changes.seq
        events += http_events.read_changes(kb, cursor)
    assert [(d["id"], d["status"]) for _, d in events] == [
        (second.id, "processing"),
        (first.id, "gone"),
    ]
