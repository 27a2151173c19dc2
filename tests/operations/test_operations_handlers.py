"""Task handlers (§5): on_settled marking, prepare-root's one transaction, skips, progress."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base
from knowbase.errors import KnowbaseError
from knowbase.operations import kinds
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def all_rows(kb: Knowledge, base: Base):  # type: ignore[no-untyped-def]
    with kb.rt.catalog.read() as conn:
        return item_repo.list_items(conn, base.id, include_deleting=True)


class Injected(KnowbaseError):
    code = "injected"


def fail_enqueue_of(kb: Knowledge, kind: str) -> None:
    real, real_many = kb.rt.jobs.enqueuer.enqueue, kb.rt.jobs.enqueuer.enqueue_many

    def enqueue(conn, job_kind, payload, **kw):  # type: ignore[no-untyped-def]
        if job_kind == kind:
            raise Injected("could not schedule (injected)")
        return real(conn, job_kind, payload, **kw)

    def enqueue_many(conn, job_kind, jobs, **kw):  # type: ignore[no-untyped-def]
        if job_kind == kind:  # a folder's files are enqueued a transaction's worth at once
            raise Injected("could not schedule (injected)")
        return real_many(conn, job_kind, jobs, **kw)

    kb.rt.jobs.enqueuer.enqueue = enqueue  # type: ignore[method-assign]
    kb.rt.jobs.enqueuer.enqueue_many = enqueue_many  # type: ignore[method-assign]


def test_cancelled_index_job_fails_the_item_interrupted(
    kb: Knowledge, kb_settings, src: Path
) -> None:  # type: ignore[no-untyped-def]
    base = kb.create_base(
        "slow",
        embedding_model_id="hash:d64?delay=0.3",
        file_processor_id=None,
        chunk_size=32,
        chunk_overlap=4,
    )
    text = "\n\n".join(f"paragraph {i} about slow embeddings" for i in range(100))
    result = kb.add(base.id, [AddInput.file(write(src / "big.md", text))])
    item, job_id = result.items[0], result.job_ids[0]
    kb.start_workers()
    wait_until(lambda: kb.get_item(base.id, item.id).status == "embedding", 20, what="embedding")
    kb.rt.jobs.cancels.cancel_and_wait([job_id], timeout_s=20)
    assert kb.activity.get_job(job_id).status == "cancelled"
    # on_settled fails the item in its own transaction just after the job's: wait for it
    wait_until(lambda: kb.get_item(base.id, item.id).status != "embedding", 20, what="item settled")
    after = kb.get_item(base.id, item.id)
    assert (after.status, after.error_code) == ("failed", "indexing_interrupted")
    assert kb.rt.store(kb.get_base(base.id)).material_ids() == set()


def test_prepare_root_children_and_jobs_are_one_transaction(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    for i in range(5):
        write(src / "docs" / "sub" / f"f{i}.md", f"file {i}")
    fail_enqueue_of(kb, kinds.INDEX_DOCUMENTS.name)
    result = kb.add(bm25_base.id, [AddInput.directory(src / "docs")], wait=True, timeout_s=30)
    rows = all_rows(kb, bm25_base)
    assert [r.id for r in rows] == [result.items[0].id]  # no half-created children
    folder = rows[0]
    assert folder.status == "failed"
    assert folder.error_code == "injected" and "could not schedule" in (folder.error_message or "")
    assert [j.kind for j in kb.activity.list_jobs()] == [kinds.PREPARE_ROOT.name]
    assert kb.activity.get_job(result.job_ids[0]).status == "failed"


@pytest.fixture
def two_files_per_tx(monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder's expansion writes two files per catalog transaction."""
    from knowbase.operations.add import prepare_root

    monkeypatch.setattr(prepare_root, "ROWS_PER_TX", 2)


@pytest.mark.usefixtures("two_files_per_tx")
def test_a_folder_bigger_than_one_transaction_indexes_every_file(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    for i in range(4):
        write(src / "docs" / "a" / f"f{i}.md", f"alpha {i}")
    write(src / "docs" / "b" / "g.md", "beta")
    write(src / "docs" / "b" / "empty.md", "")  # fails no_text_extracted, maybe mid-expansion
    write(src / "docs" / "top.md", "gamma")
    root = kb.add(bm25_base.id, [AddInput.directory(src / "docs")], wait=True, timeout_s=30)
    rows = {Path(r.title or "").name: r for r in all_rows(kb, bm25_base)}
    files = [r for r in rows.values() if r.type == "file"]
    assert len(files) == 7
    assert {r.status for r in files if r.title != "empty.md"} == {"completed"}
    assert rows["empty.md"].status == "failed"
    assert rows["a"].status == "completed"
    assert (rows["b"].status, rows["b"].error_code) == ("failed", "child_failed")
    assert rows["docs"].status == "failed"  # b failed
    assert kb.activity.get_job(root.job_ids[0]).status == "completed"
    assert [r.concept_id for r in kb.search(bm25_base.id, "beta").results] == [
        rows["g.md"].concept_id
    ]


@pytest.mark.usefixtures("two_files_per_tx")
def test_a_failed_later_transaction_takes_back_the_earlier_ones(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    for i in range(5):
        write(src / "docs" / "sub" / f"f{i}.md", f"file {i}")
    real = kb.rt.jobs.enqueuer.enqueue_many
    calls = []

    def enqueue_many(conn, job_kind, jobs, **kw):  # type: ignore[no-untyped-def]
        if job_kind == kinds.INDEX_DOCUMENTS.name:
            calls.append(jobs)
            if len(calls) == 2:  # the second transaction
                raise Injected("could not schedule (injected)")
        return real(conn, job_kind, jobs, **kw)

    kb.rt.jobs.enqueuer.enqueue_many = enqueue_many  # type: ignore[method-assign]
    result = kb.add(bm25_base.id, [AddInput.directory(src / "docs")], wait=True, timeout_s=30)
    rows = all_rows(kb, bm25_base)
    assert [r.id for r in rows] == [result.items[0].id]  # the first transaction's rows are gone
    assert (rows[0].status, rows[0].error_code) == ("failed", "injected")
    assert kb.search(bm25_base.id, "file").results == []


def test_prepare_root_fails_a_vanished_folder(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    write(src / "docs" / "a.md", "alpha")
    folder = kb.add(bm25_base.id, [AddInput.directory(src / "docs")]).items[0]
    (src / "docs" / "a.md").unlink()
    (src / "docs").rmdir()
    kb.run_until_idle(timeout_s=30)
    after = kb.get_item(bm25_base.id, folder.id)
    assert (after.status, after.error_code) == ("failed", "origin_missing")


def test_index_job_skips_a_completed_or_deleting_item(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    item = kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))], wait=True).items[0]
    before = kb.get_item(bm25_base.id, item.id)
    job = kb.rt.jobs.enqueuer.enqueue_now(
        kinds.INDEX_DOCUMENTS.name,
        {"base_id": bm25_base.id, "item_id": item.id},
        queue=f"base.{bm25_base.id}",
    )
    kb.wait([job.id], timeout_s=30)
    assert kb.activity.get_job(job.id).status == "completed"
    assert kb.get_item(bm25_base.id, item.id).updated_at == before.updated_at
    with kb.rt.catalog.write_tx() as conn:
        item_repo.mark_deleting(conn, [item.id])
    job = kb.rt.jobs.enqueuer.enqueue_now(
        kinds.INDEX_DOCUMENTS.name,
        {"base_id": bm25_base.id, "item_id": item.id},
        queue=f"base.{bm25_base.id}",
    )
    kb.wait([job.id], timeout_s=30)
    assert [r.status for r in all_rows(kb, bm25_base)] == ["deleting"]


def test_delete_job_without_deleting_rows_is_a_no_op(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    item = kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))], wait=True).items[0]
    job = kb.rt.jobs.enqueuer.enqueue_now(
        kinds.DELETE_SUBTREE.name,
        {"base_id": bm25_base.id, "root_item_ids": [item.id]},
        queue=f"base.{bm25_base.id}",
    )
    kb.wait([job.id], timeout_s=30)
    assert kb.activity.get_job(job.id).status == "completed"
    assert kb.get_item(bm25_base.id, item.id).status == "completed"


def test_failed_reindex_schedule_rolls_its_reset_back(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    """Reset and scheduling share one transaction: a failed enqueue leaves the items as they
    were (completed, still searchable), never stuck in ``processing``."""
    item = kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))], wait=True).items[0]
    fail_enqueue_of(kb, kinds.INDEX_DOCUMENTS.name)
    job_id = kb.reindex_items(bm25_base.id, [item.id], wait=True)
    assert job_id is not None
    assert kb.activity.get_job(job_id).status == "failed"
    assert kb.get_item(bm25_base.id, item.id).status == "completed"
    assert [h.concept_id for h in kb.search(bm25_base.id, "alpha").results] == ["a.md"]


def test_index_progress_is_readable(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    result = kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))], wait=True)
    job = kb.activity.get_job(result.job_ids[0])
    assert (job.status, job.progress_stage, job.progress_percent) == ("completed", "done", 100.0)


def test_idempotency_key_dedupes_a_second_add_of_the_same_job(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    result = kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))])
    item = result.items[0]
    payload = {"base_id": bm25_base.id, "item_id": item.id}
    again = kb.rt.jobs.enqueuer.enqueue_now(
        kinds.INDEX_DOCUMENTS.name,
        payload,
        queue=f"base.{bm25_base.id}",
        idempotency_key=kinds.index_key(bm25_base.id, item.id),
    )
    assert again.id == result.job_ids[0]
    assert [j.id for j in kb.activity.list_jobs()] == [again.id]


def test_a_bug_in_the_index_handler_fails_the_item_at_once(
    kb: Knowledge, bm25_base: Base, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyError is a bug, not a transient error: one attempt, the item failed internal_error."""
    from knowbase.operations.indexing import index_batch

    calls: list[str] = []

    def broken_read(rt, base, items, **kw):  # type: ignore[no-untyped-def]
        calls.extend(item.id for item in items)
        raise KeyError("page_count")  # stands for a programming error in a reader

    monkeypatch.setattr(index_batch, "read_files", broken_read)
    result = kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "# A\n\ntext"))], wait=True)
    item = kb.get_item(bm25_base.id, result.items[0].id)
    assert (item.status, item.error_code) == ("failed", "internal_error")
    assert "KeyError" in (item.error_message or "")
    (job,) = [j for j in kb.activity.list_jobs() if j.kind == kinds.INDEX_DOCUMENTS.name]
    assert (job.status, job.attempts, job.error_code) == ("failed", 1, "internal_error")
    assert len(calls) == 1
