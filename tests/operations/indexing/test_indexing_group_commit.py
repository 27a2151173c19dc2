"""Group commit: many jobs' final writes share one lock hold and one catalog transaction."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base
from knowbase.operations.add.inputs import AddInput
from knowbase.operations.indexing import group_commit
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


def notes(kb: Knowledge, base: Base, n: int) -> list[str]:
    result = kb.add(base.id, [AddInput.note(f"note number {i}") for i in range(n)])
    return [i.id for i in result.items]


def status(kb: Knowledge, item_id: str) -> str:
    with kb.rt.catalog.read() as conn:
        return item_repo.get(conn, item_id).status


def counting_transactions(kb: Knowledge) -> list[int]:
    """Count the catalog's write transactions from now on (one list entry each)."""
    real = kb.rt.catalog.write_tx
    opened: list[int] = []

    @contextmanager
    def write_tx():  # type: ignore[no-untyped-def]
        opened.append(1)
        with real() as conn:
            yield conn

    kb.rt.catalog.write_tx = write_tx  # type: ignore[method-assign]
    return opened


def test_writes_queued_behind_a_group_share_the_next_transaction(
    kb: Knowledge, bm25_base: Base
) -> None:
    ids = notes(kb, bm25_base, 9)
    opened = counting_transactions(kb)
    first_in, release = threading.Event(), threading.Event()

    def slow(conn) -> None:  # type: ignore[no-untyped-def]
        first_in.set()
        assert release.wait(10)
        item_repo.set_status(conn, ids[0], "completed")

    leader = threading.Thread(
        target=group_commit.commit, args=(kb.rt, bm25_base.id, slow), kwargs={"lock": False}
    )
    leader.start()
    assert first_in.wait(10)
    followers = [
        threading.Thread(target=group_commit.set_status, args=(kb.rt, bm25_base.id, i, "completed"))
        for i in ids[1:]
    ]
    for t in followers:
        t.start()
    wait_pending(kb, f"{bm25_base.id}\x00unlocked", len(followers))
    release.set()
    for t in [leader, *followers]:
        t.join(10)
    assert all(status(kb, i) == "completed" for i in ids)
    assert len(opened) == 2  # the leader's transaction, then one for all eight followers


def wait_pending(kb: Knowledge, key: str, n: int) -> None:
    q = group_commit._queue(kb.rt, key)
    for _ in range(2000):
        if len(q.pending) >= n:
            return
        threading.Event().wait(0.005)
    raise AssertionError("the writes never queued")


def test_a_failing_write_rolls_back_only_its_own_rows(kb: Knowledge, bm25_base: Base) -> None:
    ids = notes(kb, bm25_base, 6)
    first_in, release = threading.Event(), threading.Event()
    errors: dict[str, BaseException] = {}

    def gate(conn) -> None:  # type: ignore[no-untyped-def]
        first_in.set()
        assert release.wait(10)

    def write_for(item_id: str, fail: bool):  # type: ignore[no-untyped-def]
        def write(conn) -> None:  # type: ignore[no-untyped-def]
            item_repo.set_status(conn, item_id, "completed")
            if fail:
                raise RuntimeError(f"write of {item_id} failed")

        def run() -> None:
            try:
                group_commit.commit(kb.rt, bm25_base.id, write)
            except RuntimeError as exc:
                errors[item_id] = exc

        return run

    leader = threading.Thread(target=group_commit.commit, args=(kb.rt, bm25_base.id, gate))
    leader.start()
    assert first_in.wait(10)
    bad = ids[2]
    threads = [threading.Thread(target=write_for(i, i == bad)) for i in ids]
    for t in threads:
        t.start()
    wait_pending(kb, bm25_base.id, len(ids))  # all six queued behind the gate: one group
    release.set()
    for t in [leader, *threads]:
        t.join(10)
    assert set(errors) == {bad}
    assert status(kb, bad) != "completed"  # its SAVEPOINT rolled back
    assert all(status(kb, i) == "completed" for i in ids if i != bad)


def test_a_group_rolls_its_folder_up_once(
    kb: Knowledge, bm25_base: Base, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    for i in range(8):
        (tmp_path / "docs").mkdir(exist_ok=True)
        (tmp_path / "docs" / f"d{i}.md").write_text(f"document {i}", encoding="utf-8")
    folder = kb.add(bm25_base.id, [AddInput.directory(tmp_path / "docs")], wait=True).items[0]
    children = [i.id for i in kb.list_items(bm25_base.id) if i.group_id == folder.id]
    with kb.rt.catalog.write_tx() as conn:  # as if they were being indexed again
        for child in children:
            item_repo.set_status(conn, child, "reading")
    assert status(kb, folder.id) == "processing"
    rolled: list[str | None] = []
    real = item_repo.reconcile_containers

    def reconcile(conn, container_id):  # type: ignore[no-untyped-def]
        rolled.append(container_id)
        real(conn, container_id)

    monkeypatch.setattr(item_repo, "reconcile_containers", reconcile)
    first_in, release = threading.Event(), threading.Event()

    def gate(conn) -> None:  # type: ignore[no-untyped-def]
        first_in.set()
        assert release.wait(10)

    def finish(child: str):  # type: ignore[no-untyped-def]
        def write(conn) -> None:  # type: ignore[no-untyped-def]
            item_repo.set_status(conn, child, "completed", roll_up=False)

        return lambda: group_commit.commit(kb.rt, bm25_base.id, write, roll_up=folder.id)

    leader = threading.Thread(target=group_commit.commit, args=(kb.rt, bm25_base.id, gate))
    leader.start()
    assert first_in.wait(10)
    threads = [threading.Thread(target=finish(c)) for c in children]
    for t in threads:
        t.start()
    wait_pending(kb, bm25_base.id, len(children))
    release.set()
    for t in [leader, *threads]:
        t.join(10)
    assert rolled == [folder.id]  # once for the group, not once per child
    assert all(status(kb, c) == "completed" for c in children)
    assert status(kb, folder.id) == "completed"


def test_the_folder_roll_up_reads_children_by_index(
    kb: Knowledge, bm25_base: Base, tmp_path, kb_settings
) -> None:  # type: ignore[no-untyped-def]
    """The roll-up's children query must search the (base_id, group_id) index: a scan of every
    item per roll-up made a 5,000-file import four times slower per file than a 1,000-file one."""
    if kb_settings.database_url:
        pytest.skip("SQLite's query plan")
    import sqlalchemy as sa

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("alpha", encoding="utf-8")
    plans: list[str] = []
    engine = kb.rt.catalog.engine

    def explain(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if "GROUP BY knowledge_item.status" in statement and not plans:
            rows = cursor.connection.execute("EXPLAIN QUERY PLAN " + statement, parameters)
            plans.extend(str(r[-1]) for r in rows.fetchall())

    sa.event.listen(engine, "before_cursor_execute", explain)
    try:
        kb.add(bm25_base.id, [AddInput.directory(tmp_path / "docs")], wait=True)
    finally:
        sa.event.remove(engine, "before_cursor_execute", explain)
    assert plans, "no roll-up query ran"
    assert any("knowledge_item_base_group_created_idx" in p for p in plans), plans
