"""``delete_items``: hide at once, purge in the background, roll back with a failed enqueue."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base
from knowbase.errors import InvalidInput, KnowbaseError, NotFound
from knowbase.operations import kinds
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def raw_files(kb: Knowledge, base: Base) -> set[str]:
    raw = kb.rt.storage(base.id).path_of("x").parent
    return {p.relative_to(raw).as_posix() for p in raw.rglob("*") if p.is_file()}


def walrus_hits(kb: Knowledge, base: Base) -> list[str]:
    return [h.item_id for h in kb.search(base.id, "walrus").results if "walrus" in h.text]


def statuses(kb: Knowledge, base: Base) -> dict[str, str]:
    with kb.rt.catalog.read() as conn:
        rows = item_repo.list_items(conn, base.id, include_deleting=True)
    return {r.id: r.status for r in rows}


@pytest.fixture
def folder_base(kb: Knowledge, hash_base: Base, src: Path) -> tuple[Base, str, str]:
    """A completed folder (with one nested folder) and a completed file beside it."""
    for i in range(3):
        write(src / "docs" / "nested" / f"n{i}.md", f"walrus fact {i}")
    write(src / "docs" / "top.md", "walrus overview")
    write(src / "lone.md", "a lone pelican")
    result = kb.add(
        hash_base.id, [AddInput.directory(src / "docs"), AddInput.file(src / "lone.md")], wait=True
    )
    assert {i.status for i in kb.list_items(hash_base.id)} == {"completed"}
    return hash_base, result.items[0].id, result.items[1].id


def test_delete_hides_at_once_and_purges(kb: Knowledge, folder_base) -> None:  # type: ignore[no-untyped-def]
    base, folder_id, lone_id = folder_base
    assert len(walrus_hits(kb, base)) == 4
    job_id = kb.delete_items(base.id, [folder_id])
    assert job_id is not None
    # Hidden before any worker ran: list, get, search and the job are all consistent.
    assert [i.id for i in kb.list_items(base.id)] == [lone_id]
    with pytest.raises(NotFound):
        kb.get_item(base.id, folder_id)
    assert walrus_hits(kb, base) == []
    assert set(statuses(kb, base).values()) == {"deleting", "completed"}
    assert kb.activity.get_job(job_id).kind == kinds.DELETE_SUBTREE.name
    kb.wait([job_id], timeout_s=30)
    assert kb.activity.get_job(job_id).status == "completed"
    assert statuses(kb, base) == {lone_id: "completed"}
    store = kb.rt.store(kb.get_base(base.id))
    assert store.material_ids() == {lone_id} == store.unit_material_ids()
    assert raw_files(kb, base) == {"lone.md"}


def test_delete_collapses_to_outermost_roots(kb: Knowledge, folder_base) -> None:  # type: ignore[no-untyped-def]
    base, folder_id, _ = folder_base
    children = [i.id for i in kb.list_items(base.id) if i.group_id == folder_id]
    job_id = kb.delete_items(base.id, [*children, folder_id, folder_id])
    assert job_id is not None
    assert kb.activity.get_job(job_id).payload["root_item_ids"] == [folder_id]


def test_delete_of_a_child_rolls_the_parent_up(kb: Knowledge, folder_base) -> None:  # type: ignore[no-untyped-def]
    base, folder_id, _ = folder_base
    top = next(i for i in kb.list_items(base.id) if i.relative_path == "docs/top.md")
    kb.delete_items(base.id, [top.id], wait=True)
    assert kb.get_item(base.id, folder_id).status == "completed"
    assert top.id not in statuses(kb, base)


def test_delete_rolls_back_when_the_enqueue_fails(kb: Knowledge, folder_base) -> None:  # type: ignore[no-untyped-def]
    base, folder_id, _ = folder_base
    before = statuses(kb, base)
    jobs_before = len(kb.activity.list_jobs())

    def enqueue(*a, **kw):  # type: ignore[no-untyped-def]
        raise KnowbaseError("enqueue failed (injected)")

    kb.rt.jobs.enqueuer.enqueue = enqueue  # type: ignore[method-assign]
    with pytest.raises(KnowbaseError, match="injected"):
        kb.delete_items(base.id, [folder_id])
    assert statuses(kb, base) == before  # the old statuses, not deleting
    assert len(kb.activity.list_jobs()) == jobs_before
    assert len(walrus_hits(kb, base)) == 4


def test_delete_is_allowed_on_a_failed_base(kb: Knowledge, folder_base) -> None:  # type: ignore[no-untyped-def]
    base, _, lone_id = folder_base
    with kb.rt.catalog.write_tx() as conn:
        base_repo.update(conn, base.id, status="failed", error="missing_vector_store")
    kb.delete_items(base.id, [lone_id], wait=True)
    assert lone_id not in statuses(kb, base)


def test_delete_refuses_unknown_and_foreign_items(kb: Knowledge, folder_base, bm25_base) -> None:  # type: ignore[no-untyped-def]
    base, folder_id, _ = folder_base
    with pytest.raises(NotFound):
        kb.delete_items(base.id, ["no-such-item"])
    with pytest.raises(InvalidInput, match="another base"):
        kb.delete_items(bm25_base.id, [folder_id])
    assert kb.delete_items(base.id, []) is None
    assert set(statuses(kb, base).values()) == {"completed"}


def test_deleting_rows_never_become_failed(kb: Knowledge, folder_base) -> None:  # type: ignore[no-untyped-def]
    base, folder_id, lone_id = folder_base
    with kb.rt.catalog.write_tx() as conn:
        item_repo.mark_deleting(conn, [lone_id])
        assert item_repo.fail_items(conn, [lone_id], "boom", "boom") == []
        assert item_repo.set_status(conn, lone_id, "failed", error_message="boom") is False
        assert item_repo.set_status(conn, lone_id, "completed") is False
        assert item_repo.get(conn, lone_id).status == "deleting"
        assert item_repo.get(conn, lone_id).error_code is None


def test_delete_while_indexing_never_fails_the_item(kb: Knowledge, kb_settings, src: Path) -> None:  # type: ignore[no-untyped-def]
    """A delete cancels the running index job; its on_settled must leave the row alone."""
    base = kb.create_base(
        "slow",
        embedding_model_id="hash:d64?delay=0.3",
        file_processor_id=None,
        chunk_size=32,
        chunk_overlap=4,
    )
    text = "\n\n".join(f"paragraph {i} about slow embeddings" for i in range(100))
    item = kb.add(base.id, [AddInput.file(write(src / "big.md", text))]).items[0]
    kb.start_workers()
    deadline = time.monotonic() + 20
    while kb.get_item(base.id, item.id).status != "embedding":
        assert time.monotonic() < deadline, "indexing never started"
        time.sleep(0.05)
    job_id = kb.delete_items(base.id, [item.id])
    assert job_id is not None
    # No 'failed' may ever show up for it: poll until the row is gone.
    while item.id in statuses(kb, base):
        assert statuses(kb, base)[item.id] == "deleting"
        assert time.monotonic() < deadline + 20
        time.sleep(0.05)
    # The row goes inside the job; the job's own status is written after it returns.
    kb.wait([job_id], timeout_s=20)
    assert kb.activity.get_job(job_id).status == "completed"
    assert kb.rt.store(kb.get_base(base.id)).material_ids() == set()
