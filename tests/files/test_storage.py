"""knowbase.files: path safety, naming, reservation, and the raw/ tree on disk (§2)."""

from __future__ import annotations

import itertools
import os
import posixpath
import stat
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowbase.errors import FileExists, InvalidInput, UnsafePath
from knowbase.files import (
    RESERVED_DIR,
    BaseStorage,
    artifact_path,
    choose_directory_prefix,
    host_relative_check,
    list_orphan_base_dirs,
    name_candidates,
    note_snapshot_slug,
    reserve_relative_path,
    sanitize_filename,
    url_snapshot_slug,
    validate_relative_path,
)

BASE_ID = "0b7f1a8e-3c2d-4e5f-8a9b-1c2d3e4f5a6b"


def _tokens(tokens: list[str], max_size: int) -> st.SearchStrategy[str]:
    """Strings glued from path-ish tokens, so ``..`` and ``.kb`` show up often."""
    return st.lists(st.sampled_from(tokens), max_size=max_size).map("".join)


def take(it, n):
    return list(itertools.islice(it, n))


# --- validate_relative_path ------------------------------------------------------------------
@pytest.mark.parametrize(
    "rel",
    [
        "",
        "../x",
        "a/..",
        ".",
        "./",
        "a/./..",
        "a/../../x",
        "./.kb/x",
        ".kb",
        ".kb/",
        ".kb/index.sqlite",
        "a/../.kb/x",
        "/etc/passwd",
        "/",
        "a\x00b",
    ],
)
def test_validate_rejects_unsafe(rel):
    with pytest.raises(UnsafePath) as info:
        validate_relative_path(rel)
    assert info.value.details["path"] == rel
    assert info.value.code == "unsafe_path"


@pytest.mark.parametrize(
    "rel",
    [
        "a.pdf",
        "docs/a.md",
        "a\\b.pdf",  # one POSIX name with a backslash
        ".kb\\x",  # one legal name, not inside .kb (#17429)
        ".KB/x",  # the reserved name is case-sensitive
        ".kbx/y",
        "x/.kb/y",  # only the first segment is reserved
        "CON.txt",  # Windows legality is not checked on store
        "a<b",
        "a:b",
        "a/b/../c.pdf",
        "..x",
        "...",
    ],
)
def test_validate_accepts_and_returns_unchanged(rel):
    assert validate_relative_path(rel) is rel


@settings(max_examples=400)
@given(_tokens(list("ab./\\\x00k") + [".kb", ".."], 12))
def test_validate_property_structured(rel):
    _check_validate_property(rel)


@settings(max_examples=300)
@given(st.text(max_size=20))
def test_validate_property_arbitrary(rel):
    _check_validate_property(rel)


def _check_validate_property(rel: str) -> None:
    try:
        validate_relative_path(rel)
    except UnsafePath:
        return
    resolved = posixpath.normpath(posixpath.join("/r", rel))
    assert resolved.startswith("/r/")
    assert resolved[len("/r/") :].split("/")[0] != RESERVED_DIR


# --- host_relative_check (POSIX flavour; Windows lives in test_storage_windows.py) ------------
@pytest.mark.parametrize("rel", ["a.pdf", "a\\b.pdf", "..\\outside.pdf", "a/b/../c"])
def test_host_check_posix_allows(rel):
    host_relative_check(PurePosixPath("/home/u/bases/b/raw"), rel)


@pytest.mark.parametrize("rel", ["../x", "a/..", ".", "/etc/passwd", "a/../../x"])
def test_host_check_posix_rejects(rel):
    with pytest.raises(UnsafePath, match="on this platform"):
        host_relative_check(PurePosixPath("/home/u/bases/b/raw"), rel)


def test_host_check_sibling_with_common_prefix_is_outside():
    # "/raw-other" starts with "/raw" as a string but is not inside it.
    with pytest.raises(UnsafePath):
        host_relative_check(PurePosixPath("/b/raw"), "../raw-other/x")


# --- sanitize_filename -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ('a<b>c:d"e/f\\g|h?i*j', "a_b_c_d_e_f_g_h_i_j"),
        ("tab\there\x1fnul\x00", "tab_here_nul_"),
        ("CON", "_CON"),
        ("con.txt", "_con.txt"),
        ("LPT9.md", "_LPT9.md"),
        ("COM0", "COM0"),
        ("CONSOLE", "CONSOLE"),
        ("name. . ", "name"),
        ("...", "untitled"),
        ("", "untitled"),
        ("   ", "untitled"),
        ("Grüße 你好", "Grüße 你好"),
    ],
)
def test_sanitize_filename(name, expected):
    assert sanitize_filename(name) == expected


def test_sanitize_filename_caps_bytes():
    assert sanitize_filename("a" * 300) == "a" * 255
    cjk = sanitize_filename("你" * 100)  # 3 bytes each
    assert cjk == "你" * 85 and len(cjk.encode()) == 255


def test_sanitize_filename_cuts_the_stem_and_keeps_the_extension():
    assert sanitize_filename("a" * 297 + ".md") == "a" * 252 + ".md"
    cjk = sanitize_filename("你" * 100 + ".pdf")
    assert cjk == "你" * 83 + ".pdf" and len(cjk.encode()) == 253
    assert sanitize_filename("a" * 300 + ". .md") == "a" * 252 + ".md"  # stem's tail stripped
    absurd = sanitize_filename("a." + "b" * 300)  # no room for a stem: cut the whole name
    assert absurd == "a." + "b" * 253


# --- name_candidates -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("report.pdf", ["report.pdf", "report_1.pdf", "report_2.pdf"]),
        ("a.tar.gz", ["a.tar.gz", "a.tar_1.gz", "a.tar_2.gz"]),
        ("notes", ["notes", "notes_1", "notes_2"]),
        ("docs/a.md", ["docs/a.md", "docs/a_1.md", "docs/a_2.md"]),
        ("sub.d/readme", ["sub.d/readme", "sub.d/readme_1", "sub.d/readme_2"]),
        (".env", [".env", ".env_1", ".env_2"]),
        ("file.", ["file.", "file_1", "file_2"]),
        ("a.pdf ", ["a.pdf ", "a_1.pdf", "a_2.pdf"]),
    ],
)
def test_name_candidates(name, expected):
    assert take(name_candidates(name), 3) == expected


def test_name_candidates_directory_prefix_keeps_dots():
    assert take(name_candidates("report.v2", is_dir_prefix=True), 3) == [
        "report.v2",
        "report.v2_1",
        "report.v2_2",
    ]


def test_name_candidates_cut_stem_to_255():
    name = "d/" + "s" * 260 + ".pdf"
    bare, first, *_ = take(name_candidates(name), 12)
    for cand in (bare, first):
        assert cand.startswith("d/s")
        assert len(cand.split("/")[-1]) == 255
    assert bare.endswith("s.pdf") and first.endswith("s_1.pdf")
    tenth = take(name_candidates(name), 11)[-1]
    assert tenth.endswith("_10.pdf") and len(tenth.split("/")[-1]) == 255


def test_name_candidates_fit_exactly_255_is_kept():
    name = "s" * 251 + ".pdf"
    assert take(name_candidates(name), 2) == [name, "s" * 249 + "_1.pdf"]


# --- artifact_path ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        ("paper.pdf", "paper.md"),
        ("docs/a.b.pdf", "docs/a.b.md"),
        ("x.md", "x.md"),
        (".env", ".env.md"),
        ("noext", "noext.md"),
    ],
)
def test_artifact_path(rel, expected):
    assert artifact_path(rel) == expected


# --- reserve_relative_path -------------------------------------------------------------------
def test_reserve_takes_bare_then_suffixes():
    reserved: set[str] = set()
    assert reserve_relative_path("a.pdf", reserved) == "a.pdf"
    assert reserve_relative_path("a.pdf", reserved) == "a_1.pdf"
    assert reserve_relative_path("a.pdf", reserved) == "a_2.pdf"
    assert reserved == {"a.pdf", "a_1.pdf", "a_2.pdf"}


def test_reserve_artifact_pdf_skips_taken_md():
    reserved = {"x.md"}
    assert reserve_relative_path("x.pdf", reserved, reserve_artifact=True) == "x_1.pdf"
    assert reserved == {"x.md", "x_1.pdf", "x_1.md"}


def test_reserve_md_skips_reserved_artifact():
    reserved: set[str] = set()
    reserve_relative_path("x.pdf", reserved, reserve_artifact=True)
    assert reserve_relative_path("x.md", reserved) == "x_1.md"


def test_reserve_without_artifact_ignores_md_sibling():
    assert reserve_relative_path("x.pdf", {"x.md"}) == "x.pdf"


def test_reserve_is_case_sensitive():
    assert reserve_relative_path("A.pdf", {"a.pdf"}) == "A.pdf"


def test_reserve_top_level_kb_is_treated_as_taken():
    assert reserve_relative_path(".kb", set()) == ".kb_1"


@pytest.mark.parametrize("name", ["../x.pdf", "", "/etc/passwd", ".kb/x", "a\x00b", "a/.."])
def test_reserve_refuses_unsafe_names(name):
    reserved = {"keep"}
    with pytest.raises(UnsafePath):
        reserve_relative_path(name, reserved)
    assert reserved == {"keep"}


_names = _tokens(list("ab._/ ") + [".kb", "..", ".pdf"], 10)


@settings(max_examples=300)
@given(name=_names, taken=st.sets(_names, max_size=8), artifact=st.booleans())
def test_reserve_property(name, taken, artifact):
    reserved = set(taken)
    try:
        chosen = reserve_relative_path(name, reserved, reserve_artifact=artifact)
    except UnsafePath:
        assert reserved == taken
        return
    assert chosen not in taken
    assert validate_relative_path(chosen) == chosen
    assert chosen in reserved
    if artifact:
        assert artifact_path(chosen) not in taken
        assert artifact_path(chosen) in reserved


# --- choose_directory_prefix -----------------------------------------------------------------
def test_directory_prefix_uses_resolved_basename(tmp_path):
    src = tmp_path / "docs"
    assert choose_directory_prefix(str(src), []) == "docs"
    assert choose_directory_prefix(str(src / "sub" / ".."), []) == "docs"
    assert choose_directory_prefix(str(src) + "/", []) == "docs"


def test_directory_prefix_dedupes_against_first_segments(tmp_path):
    reserved = ["docs/a.md", "docs_1", "other/docs_2/x"]
    assert choose_directory_prefix(str(tmp_path / "docs"), reserved) == "docs_2"


def test_directory_prefix_keeps_dots_and_case(tmp_path):
    assert choose_directory_prefix(str(tmp_path / "report.v2"), ["report.v2/x"]) == "report.v2_1"
    assert choose_directory_prefix(str(tmp_path / "Docs"), ["docs/a"]) == "Docs"


def test_directory_prefix_root_and_reserved_name(tmp_path):
    assert choose_directory_prefix("/", []) == "root"
    assert choose_directory_prefix("/", ["root/a"]) == "root_1"
    assert choose_directory_prefix(str(tmp_path / ".kb"), []) == ".kb_1"


# --- snapshot slugs --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("My note\nbody", "My note"),
        ("\n   \n  Title: draft?  \nmore", "Title_ draft_"),
        ("x" * 100, "x" * 80),
        ("", "note"),
        ("  \n\t\n", "note"),
        ("untitled", "note"),
        ("...", "note"),
        ("CON", "_CON"),
        ("a/b", "a_b"),
    ],
)
def test_note_snapshot_slug(source, expected):
    assert note_snapshot_slug(source) == expected


@pytest.mark.parametrize(
    ("title", "markdown", "url", "expected"),
    [
        ("  Page: One ", "# Heading", "https://ex.com/a", "Page_ One"),
        (None, "intro\n# The Heading #\ntext", "https://ex.com/a", "The Heading"),
        ("", "## not h1\nfirst line", "https://ex.com/a", "## not h1"),
        (None, "\n\n  first line  \n", "https://ex.com/a", "first line"),
        (None, "", "https://Ex.com/docs/intro%20page/", "ex.com-intro page"),
        (None, "...", "https://ex.com/", "ex.com"),
        (None, "", "", "page"),
        (None, "", "https://ex.com/%2F..%2F", "ex.com-_.._"),
        ("t" * 90, "", "https://ex.com", "t" * 80),
    ],
)
def test_url_snapshot_slug(title, markdown, url, expected):
    assert url_snapshot_slug(title, markdown, url) == expected


# --- BaseStorage -----------------------------------------------------------------------------
@pytest.fixture
def store(tmp_path) -> BaseStorage:
    storage = BaseStorage(tmp_path / "bases", BASE_ID)
    storage.ensure()
    return storage


def test_layout(tmp_path, store):
    root = tmp_path / "bases" / BASE_ID
    assert store.root == root
    assert store.raw == root / "raw" and store.raw.is_dir()
    assert store.kb_dir == root / ".kb" and store.kb_dir.is_dir()
    assert store.index_path == root / ".kb" / "index.sqlite"
    store.ensure()  # idempotent


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "a\\b", " x", "a\x00"])
def test_base_id_must_be_one_plain_segment(tmp_path, bad):
    with pytest.raises(InvalidInput):
        BaseStorage(tmp_path, bad)


def test_path_of(store):
    assert store.path_of("docs/a.md") == store.raw / "docs" / "a.md"
    assert store.path_of("a/b/../c.pdf") == store.raw / "a" / "c.pdf"
    assert store.path_of("a\\b.pdf") == store.raw / "a\\b.pdf"
    for bad in ("../x", ".kb/index.sqlite", "/etc/passwd", "a/.."):
        with pytest.raises(UnsafePath):
            store.path_of(bad)


def test_copy_in_creates_parents_and_refuses_overwrite(tmp_path, store):
    src = tmp_path / "src.bin"
    src.write_bytes(b"one")
    target = store.copy_in(src, "docs/deep/a.bin")
    assert target == store.raw / "docs" / "deep" / "a.bin"
    assert target.read_bytes() == b"one"
    src.write_bytes(b"two")
    with pytest.raises(FileExists) as info:
        store.copy_in(src, "docs/deep/a.bin")
    assert info.value.details["path"] == "docs/deep/a.bin"
    assert target.read_bytes() == b"one"
    store.copy_in(src, "docs/deep/a.bin", overwrite=True)
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.bin"]  # no temp left


def test_copy_in_dangling_symlink_counts_as_existing(tmp_path, store):
    src = tmp_path / "src.txt"
    src.write_text("x")
    (store.raw / "link.txt").symlink_to(tmp_path / "missing")
    assert store.exists("link.txt")
    with pytest.raises(FileExists):
        store.copy_in(src, "link.txt")
    with pytest.raises(FileExists):
        store.write_text("link.txt", "x")


def test_copy_in_refuses_before_reading_the_source(tmp_path, store):
    # The lstat check comes first: no bytes are copied for a name that is already taken.
    store.write_text("a.pdf", "old")
    with pytest.raises(FileExists):
        store.copy_in(tmp_path / "does-not-exist.pdf", "a.pdf")


def test_copy_in_unsafe_path_writes_nothing(tmp_path, store):
    src = tmp_path / "src.txt"
    src.write_text("x")
    with pytest.raises(UnsafePath):
        store.copy_in(src, "../escape.txt")
    assert not (store.root / "escape.txt").exists()


def test_copy_in_failure_leaves_no_file(tmp_path, store):
    with pytest.raises(FileNotFoundError):
        store.copy_in(tmp_path / "missing.pdf", "a.pdf")
    assert list(store.raw.iterdir()) == []


def test_write_failing_midway_leaves_no_file_under_final_name(store):
    # The encoder fails after most of the text is written: only the temp file saw it.
    with pytest.raises(UnicodeEncodeError):
        store.write_text("half.md", "a" * 200_000 + "\ud800")
    assert list(store.raw.iterdir()) == []


def test_no_clobber_link_refuses_a_target_that_appeared(store):
    # Another writer created the name between the lstat check and the move.
    tmp = store.raw / ".kb-tmp-x"
    tmp.write_text("mine")
    (store.raw / "a.md").write_text("theirs")
    with pytest.raises(FileExists):
        store._link_no_clobber(str(tmp), store.raw / "a.md", "a.md")
    assert (store.raw / "a.md").read_text() == "theirs"


def test_write_text_exact_bytes_and_guards(store):
    path = store.write_text("notes/n.md", "a\r\nb\n你好")
    assert path.read_bytes() == "a\r\nb\n你好".encode()
    with pytest.raises(FileExists):
        store.write_text("notes/n.md", "other")
    store.write_text("notes/n.md", "other", overwrite=True)
    assert path.read_text(encoding="utf-8") == "other"
    assert store.exists("notes/n.md") and not store.exists("notes/none.md")


def test_delete_paths_removes_and_prunes(store):
    for rel in ("docs/a/b/one.md", "docs/a/two.md", "keep/k.md", "solo/x/y.pdf", "solo/x/y.md"):
        store.write_text(rel, rel)
    problems = store.delete_paths(["solo/x/y.pdf", "solo/x/y.md", "docs/a/two.md"], ["docs"])
    assert problems == []
    assert sorted(p.name for p in store.raw.iterdir()) == ["keep"]
    assert store.raw.is_dir()


def test_delete_paths_keeps_non_empty_ancestors(store):
    store.write_text("d/a.md", "a")
    store.write_text("d/b.md", "b")
    assert store.delete_paths(["d/a.md"]) == []
    assert [p.name for p in (store.raw / "d").iterdir()] == ["b.md"]


def test_delete_paths_missing_is_silent_and_raw_survives(store):
    assert store.delete_paths(["gone.md", "x/y/gone.md"], ["nodir"]) == []
    assert store.raw.is_dir()


def test_delete_paths_reports_unsafe_and_continues(store):
    store.write_text("a.md", "a")
    problems = store.delete_paths(["../outside", ".kb/index.sqlite", "a.md"], ["/etc"])
    assert len(problems) == 3
    assert not store.exists("a.md")
    assert store.kb_dir.is_dir()


def test_delete_paths_directory_given_as_file_is_reported(store):
    store.write_text("dir/f.md", "x")
    problems = store.delete_paths(["dir"])
    assert len(problems) == 1 and problems[0].startswith("dir:")
    assert store.exists("dir/f.md")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_delete_paths_permission_error_is_collected(store):
    store.write_text("locked/f.md", "x")
    locked = store.raw / "locked"
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        problems = store.delete_paths(["locked/f.md"])
    finally:
        locked.chmod(stat.S_IRWXU)
    assert len(problems) == 1 and "locked/f.md" in problems[0]


def test_delete_prefix_symlink_removes_link_not_target(tmp_path, store):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")
    (store.raw / "linked").symlink_to(outside, target_is_directory=True)
    assert store.delete_paths([], ["linked"]) == []
    assert (outside / "precious.txt").read_text() == "keep"
    assert not os.path.lexists(store.raw / "linked")


def test_remove_all(tmp_path, store):
    store.write_text("a.md", "a")
    store.index_path.write_bytes(b"")
    store.remove_all()
    assert not store.root.exists()
    assert (tmp_path / "bases").is_dir()
    store.remove_all()  # already gone


# --- list_orphan_base_dirs -------------------------------------------------------------------
def _age(path: Path, seconds_ago: float, now: float) -> None:
    os.utime(path, (now - seconds_ago, now - seconds_ago), follow_symlinks=False)


def test_orphans(tmp_path):
    bases = tmp_path / "bases"
    now = 1_800_000_000.0
    known, orphan, fresh, fresh_child = (
        "11111111-1111-4111-8111-111111111111",
        "22222222-2222-4222-8222-222222222222",
        "33333333-3333-4333-8333-333333333333",
        "44444444-4444-4444-8444-444444444444",
    )
    for name in (known, orphan, fresh, fresh_child, "not-a-uuid"):
        (bases / name / "raw").mkdir(parents=True)
    (bases / "55555555-5555-4555-8555-555555555555").write_text("a file")
    link = bases / "66666666-6666-4666-8666-666666666666"
    link.symlink_to(bases / orphan, target_is_directory=True)
    for path in bases.rglob("*"):
        _age(path, 3600, now)
    _age(bases / fresh, 10, now)
    _age(bases / fresh_child / "raw", 10, now)
    _age(link, 3600, now)

    assert list_orphan_base_dirs(bases, {known}, now=now) == [bases / orphan]
    assert list_orphan_base_dirs(bases, {known}, now=now, min_age_s=5) == [
        bases / orphan,
        bases / fresh,
        bases / fresh_child,
    ]
    assert list_orphan_base_dirs(tmp_path / "missing", set(), now=now) == []
