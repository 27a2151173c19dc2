"""The recovery sweep: items follow their jobs; orphaned ``deleting`` roots get a delete job."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base
from knowbase.catalog.schema import job as job_t
from knowbase.ingestion import recovery
from knowbase.ingestion.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.tasks import kinds

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
    delete_jobs = [j for j in kb.list_jobs() if j.kind == kinds.DELETE_SUBTREE.name]
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
    while kb.get_job(result.job_ids[0]).status != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    report = kb.recover()
    assert report.interrupted == []
    assert "failed" not in {i.status for i in kb.list_items(base.id)}
    kb.wait(result.job_ids, timeout_s=30)
    assert {i.status for i in kb.list_items(base.id)} == {"completed"}
