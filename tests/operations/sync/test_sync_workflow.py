"""``kb sync`` on real folders: edit, add, rename, delete between syncs (issue 15 item 1)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from knowbase.catalog.models import Base
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(90)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def hits(kb: Knowledge, base: Base, word: str) -> list[str]:
    return sorted(
        {h.concept_id for h in kb.search(base.id, word).results if word in h.text.lower()}
    )


def leaves(kb: Knowledge, base: Base) -> dict[str, str]:
    """{origin: status} of every file item; asserts no origin is held twice."""
    files = [i for i in kb.list_items(base.id) if i.type == "file"]
    origins = [i.origin for i in files]
    assert len(origins) == len(set(origins)), f"duplicate items: {origins}"
    return {str(i.origin): i.status for i in files}


def units_by_item(kb: Knowledge, base: Base) -> set[str]:
    """Material ids that hold search units (an orphan is a unit of no live item)."""
    return kb.rt.store(kb.get_base(base.id)).unit_material_ids()


class EmbedCounter:
    """Counts the texts the base's provider is asked to embed (the real provider runs)."""

    def __init__(self, kb: Knowledge, base: Base, monkeypatch: pytest.MonkeyPatch) -> None:
        provider = kb.rt.embedder(kb.get_base(base.id))
        assert provider is not None
        self.texts = 0
        real = provider.embed

        def counted(texts):  # type: ignore[no-untyped-def]
            self.texts += len(texts)
            return real(texts)

        monkeypatch.setattr(provider, "embed", counted)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    write(root / "a.md", "alpha apples are red")
    write(root / "b.md", "bravo bananas are yellow")
    write(root / "sub" / "c.md", "charlie cherries are dark")
    return root


@pytest.fixture
def synced(kb: Knowledge, hash_base: Base, folder: Path) -> Base:
    kb.add(hash_base.id, [AddInput.directory(folder)], wait=True)
    return hash_base


def test_first_sync_of_an_untouched_folder_changes_nothing_and_embeds_nothing(
    kb: Knowledge, synced: Base, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = EmbedCounter(kb, synced, monkeypatch)
    before = {i.id: i.updated_at for i in kb.list_items(synced.id) if i.type == "file"}
    report = kb.sync(synced.id, wait=True)
    assert report.job_id is None
    assert (report.added, report.changed, report.vanished, report.failed) == ([], [], [], [])
    assert len(report.unchanged) == 3
    again = kb.sync(synced.id, wait=True)
    assert again.job_id is None and len(again.unchanged) == 3
    assert counter.texts == 0
    assert {i.id for i in kb.list_items(synced.id) if i.type == "file"} == set(before)


def test_edit_add_and_delete_between_syncs(
    kb: Knowledge, synced: Base, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = {str(i.origin): i.id for i in kb.list_items(synced.id) if i.type == "file"}
    concept = {i.id: i.concept_id for i in kb.list_items(synced.id) if i.type == "file"}
    write(folder / "a.md", "alpha apples are red\n\nand now also avocados")
    write(folder / "new" / "d.md", "delta dates are sweet")
    (folder / "b.md").unlink()
    report = kb.sync(synced.id, wait=True)
    assert [c["path"] for c in report.changed] == [str(folder / "a.md")]
    assert report.changed[0]["reason"] == "size"
    assert [a["path"] for a in report.added] == [str(folder / "new" / "d.md")]
    assert [(v["path"], v["deleted"]) for v in report.vanished] == [(str(folder / "b.md"), False)]
    # changed in place: same item, same Concept ID, new text searchable, old text gone
    state = leaves(kb, synced)
    a = kb.get_item(synced.id, ids[str(folder / "a.md")])
    assert a.status == "completed" and a.concept_id == concept[a.id]
    assert hits(kb, synced, "avocados") == [a.concept_id]
    assert hits(kb, synced, "dates") == ["notes/new/d.md"]
    # not pruned: b.md is reported, still held and still searchable
    assert state[str(folder / "b.md")] == "completed"
    assert hits(kb, synced, "bananas") == ["notes/b.md"]
    root = next(i for i in kb.list_items(synced.id, roots_only=True))
    assert root.status == "completed"
    # the sync after is a no-op: nothing to embed
    counter = EmbedCounter(kb, synced, monkeypatch)
    quiet = kb.sync(synced.id, wait=True)
    assert (quiet.added, quiet.changed) == ([], [])
    assert len(quiet.vanished) == 1 and counter.texts == 0


def test_prune_deletes_vanished_files_and_folders_and_never_brings_them_back(
    kb: Knowledge, synced: Base, folder: Path
) -> None:
    (folder / "b.md").unlink()
    (folder / "sub" / "c.md").unlink()
    (folder / "sub").rmdir()
    dry = kb.sync(synced.id, prune=True, dry_run=True)
    assert dry.job_id is None and {v["reason"] for v in dry.vanished} == {
        "vanished",
        "vanished_folder",
    }
    assert len(leaves(kb, synced)) == 3  # a dry run writes nothing
    report = kb.sync(synced.id, prune=True, wait=True)
    assert all(v["deleted"] for v in report.vanished)
    assert leaves(kb, synced) == {str(folder / "a.md"): "completed"}
    assert not any(i.type == "directory" and i.group_id for i in kb.list_items(synced.id))
    assert hits(kb, synced, "bananas") == [] and hits(kb, synced, "cherries") == []
    live = {i.id for i in kb.list_items(synced.id) if i.type == "file"}
    assert units_by_item(kb, synced) <= live  # no orphan units
    again = kb.sync(synced.id, prune=True, wait=True)
    assert (again.added, again.vanished) == ([], [])
    assert leaves(kb, synced) == {str(folder / "a.md"): "completed"}


def test_base_setting_sync_deletes_prunes_without_the_flag(
    kb: Knowledge, synced: Base, folder: Path
) -> None:
    kb.update_base(synced.id, sync_deletes=True)
    (folder / "b.md").unlink()
    report = kb.sync(synced.id, wait=True)
    assert report.prune and report.vanished[0]["deleted"]
    assert str(folder / "b.md") not in leaves(kb, synced)
    kept = kb.sync(synced.id, prune=False, dry_run=True)  # the flag still wins
    assert not kept.prune


def test_rename_is_a_vanish_plus_an_add_and_keeps_the_vectors(
    kb: Knowledge, synced: Base, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = EmbedCounter(kb, synced, monkeypatch)
    os.rename(folder / "b.md", folder / "b2.md")
    report = kb.sync(synced.id, prune=True, wait=True)
    assert [a["path"] for a in report.added] == [str(folder / "b2.md")]
    assert [v["path"] for v in report.vanished] == [str(folder / "b.md")]
    assert counter.texts == 0  # same text: the embedding is reused by its text hash
    assert hits(kb, synced, "bananas") == ["notes/b2.md"]
    assert set(leaves(kb, synced)) == {str(folder / n) for n in ("a.md", "b2.md", "sub/c.md")}


def test_touched_but_identical_file_is_unchanged_and_restamped(
    kb: Knowledge, synced: Base, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = EmbedCounter(kb, synced, monkeypatch)
    later = time.time() + 100
    os.utime(folder / "a.md", (later, later))
    report = kb.sync(synced.id, wait=True)
    assert report.job_id is None and report.changed == []
    a = next(i for i in kb.list_items(synced.id) if i.origin == str(folder / "a.md"))
    st = (folder / "a.md").stat()
    assert a.data["origin_stamp"] == [st.st_size, st.st_mtime_ns]
    # same size, new content, new mtime: the hash catches it
    write(folder / "a.md", "alpha apples are RED")
    changed = kb.sync(synced.id, wait=True)
    assert [c["reason"] for c in changed.changed] == ["content"]
    assert counter.texts > 0


def test_standalone_file_items_sync_and_a_missing_origin_is_not_a_vanish(
    kb: Knowledge, hash_base: Base, tmp_path: Path
) -> None:
    one = write(tmp_path / "one.md", "one otter")
    two = write(tmp_path / "two.md", "two tigers")
    kb.add(hash_base.id, [AddInput.file(one), AddInput.file(two)], wait=True)
    write(one, "one otter and one owl")
    two.unlink()
    report = kb.sync(hash_base.id, prune=True, wait=True)
    assert [c["path"] for c in report.changed] == [str(one)]
    assert report.vanished == []
    assert [(f["path"], f["reason"]) for f in report.failed] == [(str(two), "origin_missing")]
    assert hits(kb, hash_base, "owl") == ["one.md"]
    assert hits(kb, hash_base, "tigers") == ["two.md"]  # never deleted by surprise


def test_a_failed_item_is_retried_by_sync(kb: Knowledge, synced: Base, folder: Path) -> None:
    from knowbase.catalog import items as item_repo

    a = next(i for i in kb.list_items(synced.id) if i.origin == str(folder / "a.md"))
    with kb.rt.catalog.write_tx() as conn:
        item_repo.set_status(conn, a.id, "failed", error_code="indexing_interrupted")
    report = kb.sync(synced.id, wait=True)
    assert [(c["item_id"], c["reason"]) for c in report.changed] == [(a.id, "failed")]
    assert kb.get_item(synced.id, a.id).status == "completed"


def test_a_file_that_changes_during_its_own_indexing_is_caught_by_the_next_sync(
    kb: Knowledge, tmp_path: Path
) -> None:
    base = kb.create_base("slow", embedding_model_id="hash:d16?delay=0.5", file_processor_id=None)
    root = tmp_path / "live"
    write(root / "a.md", "first version with walruses")
    kb.add(base.id, [AddInput.directory(root)], wait=True)
    write(root / "a.md", "second version with narwhals, a longer text")
    report = kb.sync(base.id)
    assert report.job_id

    def edit_while_embedding() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            item = next(i for i in kb.list_items(base.id) if i.type == "file")
            if item.status == "embedding":  # read and copied already: the copy is stale now
                write(root / "a.md", "third version with seals")
                return
            time.sleep(0.02)

    editor = threading.Thread(target=edit_while_embedding)
    editor.start()
    kb.wait([report.job_id])
    editor.join()
    assert hits(kb, base, "narwhals") == ["live/a.md"]
    follow_up = kb.sync(base.id, wait=True)
    assert [c["reason"] for c in follow_up.changed] in (["content"], ["size"])
    assert hits(kb, base, "seals") == ["live/a.md"] and hits(kb, base, "narwhals") == []
    assert kb.sync(base.id, wait=True).job_id is None


def test_ignore_rules_and_caps_apply_to_new_files(
    kb: Knowledge, synced: Base, folder: Path
) -> None:
    write(folder / ".kbignore", "secret.md\n")
    write(folder / "secret.md", "secret sauce")
    write(folder / "node_modules" / "x.md", "nodes")
    write(folder / "ok.md", "okay okapis")
    report = kb.sync(synced.id, wait=True)
    assert [a["path"] for a in report.added] == [str(folder / "ok.md")]
    assert hits(kb, synced, "sauce") == []


def test_an_item_the_user_deleted_is_not_brought_back_by_sync(
    kb: Knowledge, synced: Base, folder: Path
) -> None:
    """Deleting a file (or a sub-folder) of a synced folder is a decision: the next sync
    reports the origin files as excluded and adds nothing back (kb add of the file brings it
    back as an item of its own)."""
    by_origin = {str(i.origin): i for i in kb.list_items(synced.id) if i.origin}
    sub = next(i for i in kb.list_items(synced.id) if i.type == "directory" and i.group_id)
    kb.delete_items(synced.id, [by_origin[str(folder / "b.md")].id, sub.id], wait=True)
    write(folder / "sub" / "later.md", "lima lemons arrive later")
    report = kb.sync(synced.id, wait=True)
    assert report.added == [] and report.job_id is None
    assert sorted(e["path"] for e in report.excluded) == sorted(
        [str(folder / "b.md"), str(folder / "sub" / "c.md"), str(folder / "sub" / "later.md")]
    )
    assert leaves(kb, synced) == {str(folder / "a.md"): "completed"}
    assert hits(kb, synced, "bananas") == [] and hits(kb, synced, "lemons") == []
    # a new file beside them is still picked up
    write(folder / "e.md", "echo eggplants are purple")
    assert [a["path"] for a in kb.sync(synced.id, wait=True).added] == [str(folder / "e.md")]


def test_as_text_globs_of_a_folder_hold_for_the_files_a_sync_finds(
    kb: Knowledge, hash_base: Base, folder: Path
) -> None:
    """Issue 41: ``kb add --as-text '*.dat'`` reads matching files as text, and so does every
    later sync of the folder for the new ones."""
    (folder / "old.dat").write_bytes(b"okapi record\x00\x01\n")
    kb.add(hash_base.id, [AddInput.directory(folder).with_as_text(["*.dat"])], wait=True)
    assert hits(kb, hash_base, "okapi") == ["notes/old.dat"]
    (folder / "sub" / "new.dat").write_bytes(b"quokka record\x00\x02\n")
    report = kb.sync(hash_base.id, wait=True)
    assert [a["path"] for a in report.added] == [str(folder / "sub" / "new.dat")]
    assert leaves(kb, hash_base)[str(folder / "sub" / "new.dat")] == "completed"
    assert hits(kb, hash_base, "quokka") == ["notes/sub/new.dat"]
