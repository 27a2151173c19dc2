"""``add_items``: conflict strategies (§6 step 2), copy-in, and rollback when an enqueue fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from knowbase.catalog import bases as base_repo
from knowbase.catalog.models import Base
from knowbase.errors import BaseFailed, InvalidInput, KnowbaseError, UnsupportedFileType
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


def rel_paths(kb: Knowledge, base: Base) -> list[str]:
    return sorted(i.relative_path or "" for i in kb.list_items(base.id, roots_only=True))


def hit_paths(kb: Knowledge, base: Base, query: str) -> list[str]:
    return [h.concept_id for h in kb.search(base.id, query).results]


def fail_base(kb: Knowledge, base: Base) -> None:
    with kb.rt.catalog.write_tx() as conn:
        base_repo.update(conn, base.id, status="failed", error="missing_vector_store")


# --- guards ------------------------------------------------------------------------------------
def test_failed_base_rejects_add(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    fail_base(kb, bm25_base)
    with pytest.raises(BaseFailed, match="restore it"):
        kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))])
    assert kb.list_items(bm25_base.id) == []


def test_empty_input_is_added_and_writes_nothing(kb: Knowledge, bm25_base: Base) -> None:
    result = kb.add(bm25_base.id, [])
    assert result.status == "added" and result.items == [] and result.job_ids == []


def test_bad_input_anywhere_in_the_batch_adds_nothing(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    good = AddInput.file(write(src / "a.md", "alpha"))
    exe = src / "b.exe"
    exe.write_bytes(b"MZ\x90\x00\x03\x00\x00\x00")  # binary: a text file of any name is read
    bad = AddInput.file(exe)
    with pytest.raises(UnsupportedFileType):
        kb.add(bm25_base.id, [good, bad])
    assert kb.list_items(bm25_base.id) == []
    assert raw_files(kb, bm25_base) == set()


def test_unknown_strategy_is_refused(kb: Knowledge, bm25_base: Base) -> None:
    with pytest.raises(InvalidInput):
        kb.add(bm25_base.id, [AddInput.note("x")], strategy="merge")  # type: ignore[arg-type]


# --- rename (default) --------------------------------------------------------------------------
def test_rename_suffixes_a_taken_name(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    kb.add(bm25_base.id, [AddInput.file(write(src / "test.md", "first copy"))], wait=True)
    result = kb.add(
        bm25_base.id, [AddInput.file(write(src / "other" / "test.md", "second"))], wait=True
    )
    assert result.items[0].relative_path == "test_1.md"
    assert rel_paths(kb, bm25_base) == ["test.md", "test_1.md"]
    assert {i.status for i in kb.list_items(bm25_base.id)} == {"completed"}


def test_rename_within_one_batch(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    a = write(src / "x" / "same.md", "one")
    b = write(src / "y" / "same.md", "two")
    result = kb.add(bm25_base.id, [AddInput.file(a), AddInput.file(b)])
    assert [i.relative_path for i in result.items] == ["same.md", "same_1.md"]
    assert len(result.job_ids) == 2


# --- detect ------------------------------------------------------------------------------------
def test_detect_reports_conflicts_and_adds_nothing(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))], wait=True)
    before = raw_files(kb, bm25_base)
    fresh = AddInput.file(write(src / "fresh.md", "fresh"))
    clash = AddInput.file(write(src / "again" / "a.md", "alpha two"))
    result = kb.add(bm25_base.id, [fresh, clash], strategy="detect")
    assert result.status == "conflicts"
    assert [(c.type, c.title) for c in result.conflicts] == [("file", "a.md")]
    assert result.items == [] and result.job_ids == []
    assert rel_paths(kb, bm25_base) == ["a.md"]
    assert raw_files(kb, bm25_base) == before


def test_detect_without_conflicts_adds(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))], wait=True)
    result = kb.add(bm25_base.id, [AddInput.file(write(src / "b.md", "beta"))], strategy="detect")
    assert result.status == "added" and len(result.items) == 1


def test_detect_matches_the_deduped_path_not_the_source(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    """An item stored as ``test_2.md`` never collides with an incoming ``test.md``."""
    kb.add(bm25_base.id, [AddInput.file(write(src / "test_2.md", "two"))], wait=True)
    result = kb.add(
        bm25_base.id, [AddInput.file(write(src / "test.md", "plain"))], strategy="detect"
    )
    assert result.status == "added"
    # A renamed copy keeps source "test.md" but lives at test_1.md: deleting the original frees
    # the name, and the copy does not claim it.
    first = kb.add(bm25_base.id, [AddInput.file(write(src / "d" / "test.md", "dup"))], wait=True)
    assert first.items[0].relative_path == "test_1.md"
    original = next(i for i in kb.list_items(bm25_base.id) if i.relative_path == "test.md")
    kb.delete_items(bm25_base.id, [original.id], wait=True)
    again = kb.add(
        bm25_base.id, [AddInput.file(write(src / "e" / "test.md", "new"))], strategy="detect"
    )
    assert again.status == "added"
    assert again.items[0].relative_path == "test.md"


def test_detect_catches_duplicates_inside_the_batch(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    a = AddInput.file(write(src / "x" / "same.md", "one"))
    b = AddInput.file(write(src / "y" / "same.md", "two"))
    result = kb.add(bm25_base.id, [a, b], strategy="detect")
    assert result.status == "conflicts"
    assert [c.title for c in result.conflicts] == ["same.md"]
    assert kb.list_items(bm25_base.id) == []


def test_detect_note_title_rules(kb: Knowledge, bm25_base: Base) -> None:
    """A note's key: its snapshot name once indexed, else its title, else its first line."""
    kb.add(bm25_base.id, [AddInput.note("body text", title="Meeting notes")], wait=True)
    # Same title, different body: collides (against the written snapshot name).
    by_title = kb.add(
        bm25_base.id, [AddInput.note("other body", title="Meeting notes")], strategy="detect"
    )
    assert by_title.status == "conflicts"
    assert by_title.conflicts[0].type == "note"
    # No title: the first non-empty line stands in for it.
    by_line = kb.add(bm25_base.id, [AddInput.note("\n  Meeting notes  \nmore")], strategy="detect")
    assert by_line.status == "conflicts"
    # A different title, or the same words as a *file*, do not collide.
    other = kb.add(
        bm25_base.id, [AddInput.note("body text", title="Meeting notes 2")], strategy="detect"
    )
    assert other.status == "added"


def test_detect_note_before_its_snapshot_exists(kb: Knowledge, bm25_base: Base) -> None:
    """Without a snapshot (no worker ran yet) the existing note matches on its title."""
    kb.add(bm25_base.id, [AddInput.note("first body", title="Plans: Q3/Q4")])
    result = kb.add(
        bm25_base.id, [AddInput.note("second", title="Plans: Q3/Q4")], strategy="detect"
    )
    assert result.status == "conflicts"


def test_detect_url_matches_the_exact_trimmed_url(kb: Knowledge, bm25_base: Base) -> None:
    kb.add(bm25_base.id, [AddInput.web("https://example.com/a")])  # no worker: never fetched
    same = kb.add(bm25_base.id, [AddInput.web("  https://example.com/a ")], strategy="detect")
    assert same.status == "conflicts"
    other = kb.add(bm25_base.id, [AddInput.web("https://example.com/a/")], strategy="detect")
    assert other.status == "added"


# --- replace -----------------------------------------------------------------------------------
def test_replace_purges_the_old_item_and_takes_its_name(
    kb: Knowledge, hash_base: Base, src: Path
) -> None:
    old = kb.add(
        hash_base.id, [AddInput.file(write(src / "a.md", "aardvark burrows"))], wait=True
    ).items[0]
    assert hit_paths(kb, hash_base, "aardvark") == ["a.md"]
    new = kb.add(
        hash_base.id,
        [AddInput.file(write(src / "v2" / "a.md", "zeppelin hangar"))],
        strategy="replace",
        wait=True,
    ).items[0]
    assert new.id != old.id and new.relative_path == "a.md"
    items = kb.list_items(hash_base.id)
    assert [(i.id, i.status) for i in items] == [(new.id, "completed")]
    store = kb.rt.store(kb.get_base(hash_base.id))
    assert store.material_ids() == {new.id}
    assert hit_paths(kb, hash_base, "zeppelin") == ["a.md"]
    assert "aardvark" not in (store.content_text(new.id) or "")


def test_replace_in_batch_last_input_wins(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    a = AddInput.file(write(src / "x" / "same.md", "first version"))
    b = AddInput.file(write(src / "y" / "same.md", "second version"))
    result = kb.add(bm25_base.id, [a, b], strategy="replace", wait=True)
    assert [i.relative_path for i in result.items] == ["same.md"]
    assert result.items[0].origin == b.origin
    text = kb.rt.storage(bm25_base.id).path_of("same.md").read_text(encoding="utf-8")
    assert text == "second version"


def test_replace_purges_a_whole_directory(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    folder = src / "docs"
    for i in range(3):
        write(folder / "sub" / f"f{i}.md", f"old file {i}")
    kb.add(bm25_base.id, [AddInput.directory(folder)], wait=True)
    assert len(kb.list_items(bm25_base.id)) == 5  # root, sub, 3 files
    new_folder = src / "elsewhere" / "docs"
    write(new_folder / "only.md", "the only file")
    result = kb.add(bm25_base.id, [AddInput.directory(new_folder)], strategy="replace", wait=True)
    items = kb.list_items(bm25_base.id)
    assert {i.relative_path for i in items} == {"docs", "docs/only.md"}
    assert all(i.status == "completed" for i in items)
    assert result.items[0].relative_path in (None, "docs")  # the prefix is pinned by prepare-root
    assert raw_files(kb, bm25_base) == {"docs/only.md"}


def test_replace_without_collision_keeps_everything(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))], wait=True)
    kb.add(
        bm25_base.id, [AddInput.file(write(src / "b.md", "beta"))], strategy="replace", wait=True
    )
    assert rel_paths(kb, bm25_base) == ["a.md", "b.md"]


# --- rollback ----------------------------------------------------------------------------------
class Injected(KnowbaseError):
    """The fault injected into the job manager's enqueue."""

    code = "injected"


def fail_enqueue_after(kb: Knowledge, n: int, kind: str | None = None) -> list[str]:
    """Make the (n+1)-th enqueue (of ``kind``, when given) raise; returns the kinds enqueued."""
    real = kb.rt.jobs.enqueuer.enqueue
    seen: list[str] = []

    def enqueue(conn, job_kind, payload, **kw):  # type: ignore[no-untyped-def]
        if kind is None or job_kind == kind:
            if len(seen) >= n:
                raise Injected("enqueue failed (injected)")
            seen.append(job_kind)
        return real(conn, job_kind, payload, **kw)

    kb.rt.jobs.enqueuer.enqueue = enqueue  # type: ignore[method-assign]
    return seen


def test_enqueue_failure_rolls_the_whole_add_back(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    kb.add(bm25_base.id, [AddInput.file(write(src / "keep.md", "kept"))], wait=True)
    before = raw_files(kb, bm25_base)
    jobs_before = len(kb.activity.list_jobs())
    fail_enqueue_after(kb, 2)
    inputs = [
        AddInput.file(write(src / "one.md", "one")),
        AddInput.note("a note"),
        AddInput.file(write(src / "three.md", "three")),
    ]
    with pytest.raises(Injected):
        kb.add(bm25_base.id, inputs)
    assert rel_paths(kb, bm25_base) == ["keep.md"]  # no half-added rows
    assert raw_files(kb, bm25_base) == before  # copied files removed
    assert len(kb.activity.list_jobs()) == jobs_before  # the two enqueued jobs rolled back too
    assert {i.status for i in kb.list_items(bm25_base.id)} == {"completed"}


def test_enqueue_failure_after_a_replace_purge_leaves_no_half_item(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    """The purge commits on its own (vectors and files cannot roll back with the catalog): a
    failed add afterwards leaves neither the old item nor a completed row without material."""
    kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "alpha"))], wait=True)
    fail_enqueue_after(kb, 0)
    with pytest.raises(Injected):
        kb.add(bm25_base.id, [AddInput.file(write(src / "n" / "a.md", "new"))], strategy="replace")
    assert kb.list_items(bm25_base.id) == []
    assert kb.rt.store(kb.get_base(bm25_base.id)).material_ids() == set()
    assert raw_files(kb, bm25_base) == set()


def test_empty_file_fails_no_text_extracted(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    item = kb.add(
        bm25_base.id, [AddInput.file(write(src / "blank.md", "  \n\n\t \n"))], wait=True
    ).items[0]
    item = kb.get_item(bm25_base.id, item.id)
    assert item.status == "failed"
    assert item.error_code == "no_text_extracted"
    assert kb.rt.store(kb.get_base(bm25_base.id)).material_ids() == set()


# --- names still held on disk ------------------------------------------------------------------
def test_a_pending_delete_keeps_its_names_reserved(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    """The purge has not run yet, so ``a.md`` is still on disk: the new file becomes a_1.md."""
    old = kb.add(bm25_base.id, [AddInput.file(write(src / "a.md", "old"))], wait=True).items[0]
    kb.delete_items(bm25_base.id, [old.id])  # no worker running: the purge waits
    new = kb.add(bm25_base.id, [AddInput.file(write(src / "n" / "a.md", "new"))]).items[0]
    assert new.relative_path == "a_1.md"
    kb.run_until_idle(timeout_s=30)
    assert [(i.id, i.status) for i in kb.list_items(bm25_base.id)] == [(new.id, "completed")]
    assert raw_files(kb, bm25_base) == {"a_1.md"}


def test_an_unowned_file_on_disk_is_skipped(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    """A crash between copy and commit leaves a file no row owns; it must not block the name."""
    write(kb.rt.storage(bm25_base.id).path_of("a.md"), "orphan")
    write(kb.rt.storage(bm25_base.id).path_of("docs") / "x.md", "orphan folder")
    write(src / "docs" / "y.md", "real folder")
    result = kb.add(
        bm25_base.id,
        [AddInput.file(write(src / "a.md", "real")), AddInput.directory(src / "docs")],
        wait=True,
    )
    assert result.items[0].relative_path == "a_1.md"
    assert {i.relative_path for i in kb.list_items(bm25_base.id)} == {
        "a_1.md",
        "docs_1",
        "docs_1/y.md",
    }
    assert {i.status for i in kb.list_items(bm25_base.id)} == {"completed"}


def test_a_file_add_does_not_import_the_http_client(tmp_path: Path) -> None:
    """The URL check's module pulls in httpx (~0.2 s of a cold ``kb add``): only an add of
    pages may load it."""
    note = write(tmp_path / "note.md", "a note about sourdough")
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from knowbase.operations.add.inputs import AddInput\n"
        "from knowbase.service import Knowledge\n"
        "from knowbase.settings import Settings\n"
        f"with Knowledge(Settings(home=Path({str(tmp_path / 'home')!r}))) as kb:\n"
        "    base = kb.create_base('b', embedding_model_id=None, file_processor_id=None)\n"
        f"    kb.add(base.id, [AddInput.file(Path({str(note)!r}))], wait=True)\n"
        f"    kb.add(base.id, [AddInput.directory(Path({str(tmp_path)!r}))], wait=True)\n"
        "    print(kb.counts(base.id), 'httpx' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("False"), out.stdout
    assert "completed" in out.stdout


def test_the_home_is_never_a_source(tmp_path: Path) -> None:
    """Issue 37: a live database is SQLite's alone. A folder holding knowbase's home is added
    without the home (skipped ``knowbase_home``); a file or folder inside the home is refused
    before anything is written."""
    from knowbase.settings import Settings

    outer = tmp_path / "outer"
    write(outer / "notes" / "a.md", "# A\n\notters\n")
    with Knowledge(Settings(home=outer / "kbhome", test_providers=True)) as kb:
        base = kb.create_base("b", file_processor_id=None)
        kb.add(base.id, [AddInput.note("first")], wait=True)  # the catalog is live and used
        result = kb.add(base.id, [AddInput.directory(str(outer))], wait=True)
        root = kb.subtree(base.id, [result.items[0].id])[0]
        assert root.status == "completed", root
        assert not [p for p in raw_files(kb, base) if "kbhome" in p or "sqlite" in p]
        assert "knowbase_home" in root.data.get("skipped", {}), root.data
        index = next((outer / "kbhome" / "bases").glob("*/.kb/index.sqlite"))
        for inside in (
            outer / "kbhome" / "catalog.sqlite",
            outer / "kbhome",
            outer / "kbhome" / "bases",
            index,
            index.parent,
            index.parent.parent,
        ):
            kind = AddInput.file if inside.is_file() else AddInput.directory
            with pytest.raises(InvalidInput, match="part of knowbase's own home"):
                kb.add(base.id, [kind(str(inside))])
