"""Failed-base rules (§6) and ``restore_base``: what a failed base refuses and still allows."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowbase.catalog import bases as base_repo
from knowbase.catalog.models import Base
from knowbase.errors import BaseFailed, InvalidInput
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def fail_base(kb: Knowledge, base: Base) -> Base:
    with kb.rt.catalog.write_tx() as conn:
        return base_repo.update(conn, base.id, status="failed", error="missing_vector_store")


@pytest.fixture
def filled(kb: Knowledge, hash_base: Base, src: Path) -> tuple[Base, dict[str, str]]:
    """A completed base with a file, a folder of two files and a note; ids by name."""
    write(src / "docs" / "x.md", "xylophones")
    write(src / "docs" / "y.md", "yodelling")
    result = kb.add(
        hash_base.id,
        [
            AddInput.file(write(src / "a.md", "antelopes")),
            AddInput.directory(src / "docs"),
            AddInput.note("narwhals sing", title="Sea"),
        ],
        wait=True,
    )
    assert {i.status for i in kb.list_items(hash_base.id)} == {"completed"}
    return hash_base, {
        "file": result.items[0].id,
        "dir": result.items[1].id,
        "note": result.items[2].id,
    }


def test_failed_base_refuses_runtime_operations(kb: Knowledge, filled, src: Path) -> None:  # type: ignore[no-untyped-def]
    base, ids = filled
    fail_base(kb, base)
    with pytest.raises(BaseFailed, match="restore it before adding"):
        kb.add(base.id, [AddInput.note("more")])
    with pytest.raises(BaseFailed):
        kb.reindex_items(base.id, [ids["file"]])
    with pytest.raises(BaseFailed):
        kb.search(base.id, "antelopes")
    with pytest.raises(BaseFailed):
        kb.list_item_chunks(base.id, ids["file"])


def test_failed_base_allows_listing_delete_and_base_delete(kb: Knowledge, filled) -> None:  # type: ignore[no-untyped-def]
    base, ids = filled
    fail_base(kb, base)
    assert len(kb.list_items(base.id)) == 5
    kb.delete_items(base.id, [ids["dir"]], wait=True)
    assert {i.id for i in kb.list_items(base.id)} == {ids["file"], ids["note"]}
    kb.delete_base(base.id)
    assert kb.list_bases() == []
    assert not kb.rt.storage(base.id).index_path.exists()


def test_enable_embedding_on_an_empty_failed_base_is_allowed(kb: Knowledge, bm25_base) -> None:  # type: ignore[no-untyped-def]
    """§6: the failed-base guard runs only when the base has items."""
    fail_base(kb, bm25_base)
    assert kb.enable_embedding_model(bm25_base.id, "hash:d64").dimensions == 64


def test_list_item_chunks_needs_a_completed_item(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    item = kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha beta"))]).items[0]
    with pytest.raises(InvalidInput, match="not completed"):
        kb.list_item_chunks(bm25_base.id, item.id)
    kb.run_until_idle(timeout_s=30)
    assert [u.text for u in kb.list_item_chunks(bm25_base.id, item.id)] == ["alpha beta"]


# --- restore -----------------------------------------------------------------------------------
def test_restore_rebuilds_a_new_base_and_skips_missing_sources(kb: Knowledge, filled) -> None:  # type: ignore[no-untyped-def]
    base, ids = filled
    storage = kb.rt.storage(base.id)
    storage.path_of("a.md").unlink()  # the file's raw copy is gone: its source is "missing"
    fail_base(kb, base)  # restore is allowed (and meant) for failed bases
    result = kb.restore_base(base.id, "restored")
    assert result.skipped_missing_source_count == 1
    new = result.base
    assert new.id != base.id and new.name == "restored"
    assert (new.embedding_model_id, new.dimensions) == ("hash:d64", 64)
    assert (new.chunk_size, new.chunk_overlap) == (base.chunk_size, base.chunk_overlap)
    kb.wait(result.job_ids, timeout_s=30)
    items = kb.list_items(new.id)
    assert {i.status for i in items} == {"completed"}
    assert sorted(i.type for i in items if i.group_id is None) == ["directory", "note"]
    assert sorted(i.relative_path for i in items if i.type == "file") == ["docs/x.md", "docs/y.md"]
    assert [h.concept_id for h in kb.search(new.id, "narwhals").results][:1] == ["Sea.md"]
    # The source base is untouched.
    assert kb.get_base(base.id).status == "failed"
    assert len(kb.list_items(base.id)) == 5


def test_restore_of_a_file_uses_the_source_raw_copy(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    origin = write(src / "a.md", "original words")
    kb.add(bm25_base.id, [AddInput.file(origin)], wait=True)
    origin.unlink()  # the user's original is not needed: restore reads the raw/ copy
    result = kb.restore_base(bm25_base.id, "copy")
    assert result.skipped_missing_source_count == 0
    kb.wait(result.job_ids, timeout_s=30)
    [item] = kb.list_items(result.base.id)
    assert item.status == "completed" and item.relative_path == "a.md"
    assert item.origin == str(origin)  # re-acquire still points at the user's file


def test_restore_cleans_up_the_new_base_when_adding_fails(kb: Knowledge, filled) -> None:  # type: ignore[no-untyped-def]
    from knowbase.errors import KnowbaseError

    base, _ = filled

    def enqueue(*a, **kw):  # type: ignore[no-untyped-def]
        raise KnowbaseError("enqueue failed (injected)")

    kb.rt.jobs.enqueuer.enqueue = enqueue  # type: ignore[method-assign]
    with pytest.raises(KnowbaseError, match="injected"):
        kb.restore_base(base.id, "doomed")
    assert [b.name for b in kb.list_bases()] == [base.name]
