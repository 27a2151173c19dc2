"""The recovery sweep: items follow their jobs; orphaned ``deleting`` roots get a delete job."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base
from knowbase.catalog.schema import job as job_t
from knowbase.operations import kinds, recovery
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def drop_jobs(kb: Knowledge) -> None:
    """What a crash of a process that never committed its jobs would look like to the sweep."""
    with kb.rt.catalog.write_tx() as conn:
        conn.execute(sa.delete(job_t))


def test_sweep_leaves_items_whose_job_is_pending(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    item = kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))]).items[0]
    report = kb.recover()
    assert report.interrupted == []
    assert kb.get_item(bm25_base.id, item.id).status == "processing"
    kb.run_until_idle(timeout_s=30)
    assert kb.get_item(bm25_base.id, item.id).status == "completed"


def test_sweep_covers_children_through_their_ancestors_job(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    """A reindex-subtree job names only the roots; the rows under them are covered too."""
    write(src / "docs" / "a.md", "alpha")
    folder = kb.add(bm25_base.id, [AddInput.directory(src / "docs")], wait=True).items[0]
    kb.reindex_items(bm25_base.id, [folder.id], reacquire=False)
    with kb.rt.catalog.write_tx() as conn:  # as the reindex reset would, before its children run
        item_repo.set_statuses_raw(conn, item_repo.subtree_ids(conn, [folder.id]), "processing")
    assert kb.recover().interrupted == []


def test_sweep_fails_active_items_without_a_live_job(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    write(src / "docs" / "a.md", "alpha")
    leaf = kb.add(bm25_base.id, [AddInput.file(write(src / "b.md", "beta"))]).items[0]
    folder = kb.add(bm25_base.id, [AddInput.directory(src / "docs")]).items[0]
    drop_jobs(kb)
    report = kb.recover()
    assert sorted(report.interrupted) == sorted([leaf.id, folder.id])
    for item_id in (leaf.id, folder.id):
        item = kb.get_item(bm25_base.id, item_id)
        assert (item.status, item.error_code) == ("failed", "indexing_interrupted")
    assert kb.recover().interrupted == []  # idempotent


def test_sweep_reenqueues_orphaned_deletes_in_chunks(
    kb: Knowledge, bm25_base: Base, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recovery, "DELETE_CHUNK", 2)
    items = kb.add(
        bm25_base.id, [AddInput.file(write(src / f"f{i}.md", f"file {i}")) for i in range(5)]
    ).items
    kb.run_until_idle(timeout_s=30)
    with kb.rt.catalog.write_tx() as conn:
        item_repo.mark_deleting(conn, [i.id for i in items])  # a crash before the enqueue
    report = kb.recover()
    assert report.deletes_enqueued == 3  # 5 roots in chunks of 2
    delete_jobs = [j for j in kb.activity.list_jobs() if j.kind == kinds.DELETE_SUBTREE.name]
    assert sorted(len(j.payload["root_item_ids"]) for j in delete_jobs) == [1, 2, 2]
    assert kb.recover().deletes_enqueued == 0  # covered by the pending jobs now
    kb.run_until_idle(timeout_s=30)
    with kb.rt.catalog.read() as conn:
        assert item_repo.list_items(conn, bm25_base.id, include_deleting=True) == []
    assert kb.rt.store(kb.get_base(bm25_base.id)).material_ids() == set()


def test_sweep_leaves_a_folder_whose_children_are_still_running(kb: Knowledge, src: Path) -> None:
    """Once prepare-root is done no job names the folder rows; they are roll-ups of their
    children and must not be failed as interrupted while the children index."""
    base = kb.create_base("slow", embedding_model_id="hash:d64?delay=0.3", file_processor_id=None)
    for i in range(6):
        write(src / "docs" / f"sub{i % 2}" / f"f{i}.md", f"file {i}")
    result = kb.add(base.id, [AddInput.directory(src / "docs")])
    kb.start_workers(threads=1)
    import time

    deadline = time.monotonic() + 30
    while kb.activity.get_job(result.job_ids[0]).status != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    report = kb.recover()
    assert report.interrupted == []
    assert "failed" not in {i.status for i in kb.list_items(base.id)}
    kb.wait(result.job_ids, timeout_s=30)
    assert {i.status for i in kb.list_items(base.id)} == {"completed"}


def test_sweep_prunes_old_terminal_jobs_by_the_retention_setting(kb_settings, src: Path) -> None:  # type: ignore[no-untyped-def]
    from knowbase.clock import ManualClock

    clock = ManualClock(1_900_000_000.0)
    with Knowledge(kb_settings.with_(job_retention_days=2), clock=clock) as kb:
        base = kb.create_base("b", file_processor_id=None)
        old = kb.add(base.id, [AddInput.note("first note")], wait=True)
        clock.advance(3 * 86_400)
        old_tree = {j.id for j in kb.activity.job_tree(old.job_ids)}
        assert old_tree
        new = kb.add(base.id, [AddInput.note("second note")], wait=True)  # starts the sweep
        kb.recover()
        left = {j.id for j in kb.activity.list_jobs(limit=1_000)}
        assert not left & old_tree
        assert set(new.job_ids) <= left
        # the items themselves are untouched: only job history goes
        assert [i.status for i in kb.list_items(base.id)] == ["completed", "completed"]


def test_sweep_removes_only_old_base_folders_without_a_row(kb: Knowledge, bm25_base: Base) -> None:
    import os
    import time
    import uuid

    bases_dir = kb.settings.bases_dir
    orphan = bases_dir / str(uuid.uuid4())
    (orphan / "raw").mkdir(parents=True)
    (orphan / "raw" / "left.md").write_text("left behind by a crash")
    fresh = bases_dir / str(uuid.uuid4())  # a base being created right now: no row yet
    fresh.mkdir()
    not_a_base = bases_dir / "notes"
    not_a_base.mkdir()
    old = time.time() - 2 * recovery.ORPHAN_GRACE_S
    for path in (orphan / "raw" / "left.md", orphan / "raw", orphan, not_a_base):
        os.utime(path, (old, old))
    os.utime(bases_dir / bm25_base.id, (old, old))
    report = kb.recover()
    assert report.orphan_dirs_removed == [orphan.name]
    assert not orphan.exists()
    assert fresh.is_dir() and not_a_base.is_dir()
    assert (bases_dir / bm25_base.id).is_dir()
    assert kb.search(bm25_base.id, "anything").results == []  # the live base still works


def test_a_sweep_with_nothing_active_reads_no_jobs(
    kb: Knowledge, bm25_base: Base, monkeypatch: pytest.MonkeyPatch
) -> None:
    from knowbase.operations import recovery

    kb.add(bm25_base.id, [AddInput.note("done already")], wait=True)
    calls: list[set[str]] = []
    real = recovery._covered_ids

    def counting(rt):  # type: ignore[no-untyped-def]
        calls.append(real(rt))
        return calls[-1]

    monkeypatch.setattr(recovery, "_covered_ids", counting)
    assert kb.recover().interrupted == []
    assert calls == []  # nothing active, nothing deleting: the job table is not walked
    item = kb.add(bm25_base.id, [AddInput.note("queued")]).items[0]
    assert kb.recover().interrupted == []  # covered by its pending job
    assert calls == [{item.id}] and kb.get_item(bm25_base.id, item.id).status == "processing"
