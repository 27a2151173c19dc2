"""``reindex_items`` (re-acquire from the origin, DESIGN improvement 1), ``retry_failed`` and
``enable_embedding_model``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from knowbase.catalog import bases as base_repo
from knowbase.catalog.models import Base
from knowbase.errors import BaseFailed, Conflict, InvalidInput
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def raw_text(kb: Knowledge, base: Base, rel: str) -> str:
    return kb.rt.storage(base.id).path_of(rel).read_text(encoding="utf-8")


def hits(kb: Knowledge, base: Base, query: str, word: str | None = None) -> list[str]:
    """Concept ids of the hits whose text holds ``word`` (default: the query itself)."""
    word = (word or query).lower()
    return [h.concept_id for h in kb.search(base.id, query).results if word in h.text.lower()]


# --- guards ------------------------------------------------------------------------------------
def test_reindex_rejects_a_failed_base(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    item = kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))], wait=True).items[0]
    with kb.rt.catalog.write_tx() as conn:
        base_repo.update(conn, bm25_base.id, status="failed", error="missing_vector_store")
    with pytest.raises(BaseFailed):
        kb.reindex_items(bm25_base.id, [item.id])


def test_reindex_rejects_the_whole_batch_with_a_busy_subtree(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    done = kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))], wait=True).items[0]
    write(src / "dir" / "x.md", "x")
    busy = kb.add(bm25_base.id, [AddInput.directory(src / "dir")]).items[0]  # no worker: preparing
    jobs_before = len(kb.activity.list_jobs())
    with pytest.raises(Conflict, match="entire subtree is completed or failed") as info:
        kb.reindex_items(bm25_base.id, [done.id, busy.id])
    assert info.value.details["statuses"] == {"preparing": 1}
    assert len(kb.activity.list_jobs()) == jobs_before  # nothing enqueued, nothing written
    assert kb.get_item(bm25_base.id, done.id).status == "completed"


def test_reindex_unknown_item_is_not_found(kb: Knowledge, bm25_base: Base) -> None:
    from knowbase.errors import NotFound

    with pytest.raises(NotFound):
        kb.reindex_items(bm25_base.id, ["nope"])


# --- re-acquire --------------------------------------------------------------------------------
def test_reindex_recopies_a_changed_file(kb: Knowledge, hash_base: Base, src: Path) -> None:
    origin = write(src / "a.md", "the old text mentions badgers")
    item = kb.add(hash_base.id, [AddInput.file(origin)], wait=True).items[0]
    assert hits(kb, hash_base, "badgers") == ["a.md"]
    origin.write_text("the new text mentions otters", encoding="utf-8")
    kb.reindex_items(hash_base.id, [item.id], wait=True)
    after = kb.get_item(hash_base.id, item.id)
    assert after.status == "completed"
    assert "warning" not in after.data
    assert raw_text(kb, hash_base, "a.md") == "the new text mentions otters"
    assert hits(kb, hash_base, "otters") == ["a.md"]
    assert hits(kb, hash_base, "badgers") == []


def test_reindex_without_reacquire_rebuilds_from_raw(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    origin = write(src / "a.md", "badgers")
    item = kb.add(bm25_base.id, [AddInput.file(origin)], wait=True).items[0]
    origin.write_text("otters", encoding="utf-8")
    kb.reindex_items(bm25_base.id, [item.id], reacquire=False, wait=True)
    assert raw_text(kb, bm25_base, "a.md") == "badgers"
    assert hits(kb, bm25_base, "badgers") == ["a.md"]


def test_reindex_of_a_vanished_file_rebuilds_from_raw_and_warns(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    origin = write(src / "gone.md", "ferrets remain")
    keep = write(src / "keep.md", "old keep")
    gone = kb.add(bm25_base.id, [AddInput.file(origin)], wait=True).items[0]
    kept = kb.add(bm25_base.id, [AddInput.file(keep)], wait=True).items[0]
    origin.unlink()
    keep.write_text("new keep", encoding="utf-8")
    kb.reindex_items(bm25_base.id, [gone.id, kept.id], wait=True)  # never refuses the batch
    gone_after = kb.get_item(bm25_base.id, gone.id)
    assert gone_after.status == "completed"
    assert gone_after.data.get("warning") == "origin_missing"
    assert hits(kb, bm25_base, "ferrets") == ["gone.md"]
    kept_after = kb.get_item(bm25_base.id, kept.id)
    assert "warning" not in kept_after.data
    assert raw_text(kb, bm25_base, "keep.md") == "new keep"


def test_reindex_rewrites_a_note_from_its_content(kb: Knowledge, bm25_base: Base) -> None:
    note = kb.add(bm25_base.id, [AddInput.note("llamas graze", title="Farm")], wait=True).items[0]
    rel = kb.get_item(bm25_base.id, note.id).relative_path
    assert rel and "llamas graze" in raw_text(kb, bm25_base, rel)
    kb.rt.storage(bm25_base.id).path_of(rel).write_text("tampered", encoding="utf-8")
    kb.reindex_items(bm25_base.id, [note.id], reacquire=False, wait=True)
    assert raw_text(kb, bm25_base, rel) == "tampered"  # from raw/: the snapshot stays
    kb.reindex_items(bm25_base.id, [note.id], wait=True)
    after = kb.get_item(bm25_base.id, note.id)
    assert after.relative_path == rel  # rewritten in place, not renamed
    assert "llamas graze" in raw_text(kb, bm25_base, rel)
    assert hits(kb, bm25_base, "llamas") == [rel]


def test_reindex_rescans_a_folder(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    write(src / "docs" / "a.md", "apples")
    write(src / "docs" / "b.md", "bananas")
    folder = kb.add(bm25_base.id, [AddInput.directory(src / "docs")], wait=True).items[0]
    (src / "docs" / "b.md").unlink()
    write(src / "docs" / "sub" / "c.md", "cherries")
    kb.reindex_items(bm25_base.id, [folder.id], wait=True)
    items = kb.list_items(bm25_base.id)
    files = sorted(i.relative_path or "" for i in items if i.type == "file")
    assert files == ["docs/a.md", "docs/sub/c.md"]
    assert len([i for i in items if i.type == "directory"]) == 2
    assert {i.status for i in items} == {"completed"}
    assert hits(kb, bm25_base, "cherries") == ["docs/sub/c.md"]
    assert hits(kb, bm25_base, "bananas") == []
    raw = kb.rt.storage(bm25_base.id).path_of("docs")
    assert not (raw / "b.md").exists()


def test_reindex_of_a_vanished_folder_rebuilds_from_raw(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    write(src / "docs" / "a.md", "apples")
    write(src / "docs" / "b.md", "bananas")
    folder = kb.add(bm25_base.id, [AddInput.directory(src / "docs")], wait=True).items[0]
    ids_before = {i.id for i in kb.list_items(bm25_base.id)}
    shutil.rmtree(src / "docs")
    kb.reindex_items(bm25_base.id, [folder.id], wait=True)
    items = kb.list_items(bm25_base.id)
    assert {i.id for i in items} == ids_before  # children kept, rebuilt in place
    assert {i.status for i in items} == {"completed"}
    assert kb.get_item(bm25_base.id, folder.id).data.get("warning") == "origin_missing"
    assert hits(kb, bm25_base, "bananas") == ["docs/b.md"]


# --- retry -------------------------------------------------------------------------------------
def test_retry_failed_rebuilds_failed_items_from_raw(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    write(src / "docs" / "good.md", "good words")
    write(src / "docs" / "blank.md", "   \n")
    folder = kb.add(bm25_base.id, [AddInput.directory(src / "docs")], wait=True).items[0]
    folder = kb.get_item(bm25_base.id, folder.id)
    assert folder.status == "failed" and folder.error_message == "One or more child items failed"
    blank = next(i for i in kb.list_items(bm25_base.id) if i.relative_path == "docs/blank.md")
    assert blank.error_code == "no_text_extracted"
    # Fix the raw copy (retry never re-acquires), then retry.
    kb.rt.storage(bm25_base.id).path_of("docs/blank.md").write_text("now has words")
    write(src / "docs" / "blank.md", "the origin says something else")
    job_id = kb.retry_failed(bm25_base.id, wait=True)
    assert job_id is not None
    assert {i.status for i in kb.list_items(bm25_base.id)} == {"completed"}
    assert sorted(hits(kb, bm25_base, "words")) == ["docs/blank.md", "docs/good.md"]
    assert hits(kb, bm25_base, "origin") == []
    assert kb.retry_failed(bm25_base.id) is None  # nothing failed any more


# --- container roll-up -------------------------------------------------------------------------
def test_folder_completes_when_every_child_completes(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    for i in range(4):
        write(src / "docs" / ("sub" if i % 2 else "") / f"f{i}.md", f"file {i}")
    folder = kb.add(bm25_base.id, [AddInput.directory(src / "docs")], wait=True).items[0]
    items = kb.list_items(bm25_base.id)
    assert kb.get_item(bm25_base.id, folder.id).status == "completed"
    assert len([i for i in items if i.type == "directory"]) == 2
    assert {i.status for i in items} == {"completed"}


def test_folder_with_no_indexable_files_fails(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    binary = src / "empty" / "binary.exe"
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"MZ\x90\x00\x03\x00\x00\x00" * 8)  # not text (NUL bytes): skipped
    folder = kb.add(bm25_base.id, [AddInput.directory(src / "empty")], wait=True).items[0]
    folder = kb.get_item(bm25_base.id, folder.id)
    assert folder.status == "failed"
    assert (folder.error_message or "").startswith("Directory contains no indexable files")


# --- enable embeddings -------------------------------------------------------------------------
def test_enable_embedding_turns_bm25_into_hybrid(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    write(src / "docs" / "a.md", "porcupines have quills")
    kb.add(bm25_base.id, [AddInput.directory(src / "docs"), AddInput.note("hedgehogs")], wait=True)
    assert kb.search(bm25_base.id, "porcupines").mode == "bm25"
    base = kb.enable_embedding_model(bm25_base.id, "hash:d64")
    # A model switch from no model: BM25 serves until the stored chunks are embedded.
    assert (base.embedding_model_id, base.dimensions) == (None, None)
    kb.run_until_idle(timeout_s=30)
    base = kb.get_base(base.id)
    assert (base.embedding_model_id, base.dimensions) == ("hash:d64", 64)
    assert {i.status for i in kb.list_items(base.id)} == {"completed"}
    response = kb.search(base.id, "porcupines")
    assert response.mode == "hybrid"
    assert response.results[0].concept_id == "docs/a.md"
    assert response.explain["dense_lane"] == {"used": True, "hits": 2}
    with pytest.raises(InvalidInput, match="already uses"):
        kb.enable_embedding_model(base.id, "hash:d64")


def test_enable_embedding_on_an_empty_base(kb: Knowledge, bm25_base: Base) -> None:
    base = kb.enable_embedding_model(bm25_base.id, "hash:d64")
    assert base.dimensions == 64
    assert kb.activity.list_jobs(base=base.id) == []


def test_enable_embedding_refuses_a_busy_or_failed_base(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))])  # no worker: processing
    with pytest.raises(Conflict):
        kb.enable_embedding_model(bm25_base.id, "hash:d64")
    assert kb.get_base(bm25_base.id).embedding_model_id is None
    with kb.rt.catalog.write_tx() as conn:
        base_repo.update(conn, bm25_base.id, status="failed", error="missing_vector_store")
    with pytest.raises(BaseFailed):
        kb.enable_embedding_model(bm25_base.id, "hash:d64")
    assert kb.get_base(bm25_base.id).embedding_model_id is None
