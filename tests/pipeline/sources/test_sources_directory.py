"""Folder expansion: ignore rules, skip reasons, order, empty folders, root errors."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowbase.errors import InvalidInput, OriginMissing
from knowbase.pipeline.sources.directory import SKIP_REASONS, Expansion, expand
from knowbase.pipeline.sources.ignore import DEFAULT_IGNORES, IgnoreRules

SUPPORTED = {".md", ".txt", ".pdf", ".html", ".csv"}


def is_supported(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in SUPPORTED


def write(root: Path, rel: str, content: str | bytes = "text") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    write(root, "README.md", "# readme")
    write(root, "notes.txt", "notes")
    write(root, ".gitignore", "*.log\nsecret/\n*.draft.md\n")
    write(root, "app.log", "log line")
    write(root, ".hidden.md", "dot file")
    write(root, ".git/config", "[core]")
    write(root, "node_modules/pkg/index.md", "dependency docs")
    write(root, "build/out.md", "build output")
    write(root, "secret/plan.md", "secret")
    write(root, "blob.bin", b"\x00\x01\x02")
    write(root, "big.md", "x" * 500)
    write(root, "wip.draft.md", "draft")
    (root / "link.md").symlink_to(root / "README.md")
    (root / "linkdir").symlink_to(root / "docs", target_is_directory=True)
    (root / "empty").mkdir()
    write(root, "onlyjunk/x.bin", b"\x00")
    write(root, "docs/guide.md", "guide")
    write(root, "docs/.kbignore", "drafts/\n*.tmp.md\n!keep.tmp.md\n")
    write(root, "docs/drafts/d.md", "draft")
    write(root, "docs/a.tmp.md", "tmp")
    write(root, "docs/keep.tmp.md", "kept by negation")
    write(root, "docs/deep/x/y.md", "deep")
    write(root, "docs/sub/.gitignore", "!keep.draft.md\n")
    write(root, "docs/sub/keep.draft.md", "re-included below the root rule")
    write(root, "docs/sub/other.draft.md", "still ignored")
    os.mkfifo(root / "pipe.md")
    return root


RULES = IgnoreRules(max_file_bytes=100)


def test_returns_exactly_the_importable_files(tree: Path) -> None:
    result = expand(tree, RULES, is_supported=is_supported)
    assert [f.rel for f in result.files] == [
        "README.md",
        "notes.txt",
        "docs/guide.md",
        "docs/keep.tmp.md",
        "docs/deep/x/y.md",
        "docs/sub/keep.draft.md",
    ]
    assert [d.rel for d in result.dirs] == ["docs", "docs/deep", "docs/deep/x", "docs/sub"]
    readme = result.files[0]
    assert readme.abs_path == tree / "README.md"
    assert readme.size == len("# readme")


def test_skip_report_gives_reasons_and_counts(tree: Path) -> None:
    result = expand(tree, RULES, is_supported=is_supported)
    reasons = {s.rel: s.reason for s in result.skipped}
    assert reasons == {
        ".git": "ignored_default",
        "node_modules": "ignored_default",
        "build": "ignored_default",
        ".gitignore": "dot_entry",
        ".hidden.md": "dot_entry",
        "link.md": "symlink",
        "linkdir": "symlink",
        "pipe.md": "not_regular",
        "app.log": "ignored_gitignore",
        "secret": "ignored_gitignore",
        "wip.draft.md": "ignored_gitignore",
        "blob.bin": "unsupported_type",
        "big.md": "too_large",
        "onlyjunk/x.bin": "unsupported_type",
        "docs/.kbignore": "dot_entry",
        "docs/drafts": "ignored_kbignore",
        "docs/a.tmp.md": "ignored_kbignore",
        "docs/sub/.gitignore": "dot_entry",
        "docs/sub/other.draft.md": "ignored_gitignore",
    }
    assert len(result.skipped) == len(reasons)  # each entry reported once
    report = result.skip_report(max_named=2)
    assert report["ignored_default"] == {"count": 3, "files": [".git", "build"]}
    assert report["dot_entry"]["count"] == 4
    assert report["unsupported_type"] == {"count": 2, "files": ["blob.bin", "onlyjunk/x.bin"]}
    assert report["too_large"] == {"count": 1, "files": ["big.md"]}
    every = result.skip_report()  # by default every skipped entry is named (issue 41)
    assert sorted(every["dot_entry"]["files"]) == sorted(  # type: ignore[arg-type]
        r for r, why in reasons.items() if why == "dot_entry"
    )
    assert set(report) <= set(SKIP_REASONS)


def test_nothing_below_a_skipped_folder_is_visited(tree: Path) -> None:
    result = expand(tree, RULES, is_supported=is_supported)
    for skip in result.skipped:
        assert not skip.rel.startswith(("node_modules/", ".git/", "secret/", "docs/drafts/"))


def test_rules_can_be_switched_off(tree: Path) -> None:
    rules = IgnoreRules(
        default_ignores=(), use_gitignore=False, use_kbignore=False, max_file_bytes=None
    )
    result = expand(tree, rules, is_supported=is_supported)
    rels = {f.rel for f in result.files}
    assert {"node_modules/pkg/index.md", "build/out.md", "secret/plan.md", "big.md"} <= rels
    assert {"docs/drafts/d.md", "docs/a.tmp.md", "wip.draft.md"} <= rels
    reasons = {s.reason for s in result.skipped}
    # .git is still a dot entry once it is no longer a default ignore.
    assert reasons == {"dot_entry", "symlink", "not_regular", "unsupported_type"}


def test_extra_patterns_apply_from_the_root(tree: Path) -> None:
    rules = IgnoreRules(max_file_bytes=100, extra_patterns=("docs/deep/", "notes.txt"))
    result = expand(tree, rules, is_supported=is_supported)
    reasons = {s.rel: s.reason for s in result.skipped}
    assert reasons["docs/deep"] == "ignored_kbignore"
    assert reasons["notes.txt"] == "ignored_kbignore"
    assert "docs/deep" not in [d.rel for d in result.dirs]


def test_a_deeper_kbignore_can_re_include_what_the_root_gitignore_ignores(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "*.md\n")
    write(tmp_path, "a/.kbignore", "!keep.md\n")
    write(tmp_path, "a/keep.md")
    write(tmp_path, "a/drop.md")
    result = expand(tmp_path, IgnoreRules(), is_supported=is_supported)
    assert [f.rel for f in result.files] == ["a/keep.md"]


def test_default_ignores_match_by_glob_and_only_folders(tmp_path: Path) -> None:
    write(tmp_path, "pkg.egg-info/PKG-INFO.txt")
    write(tmp_path, "build", "a file called build is not a build folder")  # no extension
    write(tmp_path, "dist.md", "a file named like a default ignore")
    result = expand(tmp_path, IgnoreRules(), is_supported=is_supported)
    assert [f.rel for f in result.files] == ["build", "dist.md"]  # text: taken (issue 41)
    assert {s.rel: s.reason for s in result.skipped} == {"pkg.egg-info": "ignored_default"}
    assert "node_modules" in DEFAULT_IGNORES


def test_missing_root_is_origin_missing(tmp_path: Path) -> None:
    with pytest.raises(OriginMissing) as info:
        expand(tmp_path / "gone", IgnoreRules(), is_supported=is_supported)
    assert info.value.details["path"] == str(tmp_path / "gone")


def test_root_that_is_a_file_is_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        expand(write(tmp_path, "a.md"), IgnoreRules(), is_supported=is_supported)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads everything")
def test_unreadable_entries_are_reported(tmp_path: Path) -> None:
    write(tmp_path, "ok.md")
    locked = write(tmp_path, "locked/a.md").parent
    secret = write(tmp_path, "secret.md")
    locked.chmod(0)
    secret.chmod(0)
    try:
        result = expand(tmp_path, IgnoreRules(), is_supported=is_supported)
    finally:
        locked.chmod(0o755)
        secret.chmod(0o644)
    assert [f.rel for f in result.files] == ["ok.md"]
    assert {s.rel: s.reason for s in result.skipped} == {
        "locked": "unreadable",
        "secret.md": "unreadable",
    }


def test_progress_and_cancellation(tree: Path) -> None:
    seen: list[int] = []
    expand(tree, RULES, is_supported=is_supported, on_progress=seen.append)
    assert seen == sorted(seen) and seen[-1] > 0

    class Cancelled(Exception):
        pass

    calls = 0

    def cancel_on_second_folder() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise Cancelled

    with pytest.raises(Cancelled):
        expand(tree, RULES, is_supported=is_supported, check_cancelled=cancel_on_second_folder)


def test_readers_is_supported_is_the_default(tree: Path) -> None:
    from knowbase.pipeline import readers  # our own package: an import error is a failure

    write(tree, "slides.pptx", b"PK")  # readers support it; this file's SUPPORTED does not
    result = expand(tree, RULES)
    files = [f.rel for f in result.files]
    assert "README.md" in files and "slides.pptx" in files
    assert "blob.bin" in [s.rel for s in result.skipped if s.reason == "unsupported_type"]
    for f in result.files:
        assert readers.is_supported(f.rel)
    for s in result.skipped:
        if s.reason == "unsupported_type":
            assert not readers.is_supported(s.rel)


def test_empty_tree_gives_nothing() -> None:
    assert Expansion().skip_report() == {}


_segment = st.sampled_from(["a", "b", "B", "c d", "é", "node_modules", ".x", "z"])
_leaf = st.sampled_from(["f.md", "g.txt", "h.bin", ".dot.md", "Z.md"])
_paths = st.lists(
    st.builds(lambda dirs, leaf: "/".join([*dirs, leaf]), st.lists(_segment, max_size=3), _leaf),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(_paths)
def test_expansion_invariants(rels: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        created: set[str] = set()
        for rel in rels:
            try:
                write(root, rel, b"\x00\x01" if rel.endswith(".bin") else "text")
                created.add(rel)
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                pass  # a path both a file and a folder: keep whichever came first
        result = expand(root, IgnoreRules(), is_supported=is_supported)
        files = [f.rel for f in result.files]
        dirs = [d.rel for d in result.dirs]
        expected = {
            rel
            for rel in created
            if (root / rel).is_file()
            and is_supported(rel)
            and not any(p.startswith(".") or p == "node_modules" for p in rel.split("/"))
        }
        assert set(files) == expected
        assert len(files) == len(set(files))
        # Every listed folder holds a file; every file's folders are listed, parents first.
        assert set(dirs) == {
            "/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)
        }
        for i, d in enumerate(dirs):
            if "/" in d:
                assert d.rsplit("/", 1)[0] in dirs[:i]
        assert "" not in dirs
        # Deterministic: a second walk gives the same answer.
        again = expand(root, IgnoreRules(), is_supported=is_supported)
        assert (again.files, again.dirs, again.skipped) == (
            result.files,
            result.dirs,
            result.skipped,
        )


def test_default_ignores_cover_the_usual_build_and_cache_dirs() -> None:
    rules = IgnoreRules()
    for name in (
        "node_modules",
        ".git",
        "__pycache__",
        ".venv",
        "venv",
        "dist",
        "build",
        ".cache",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".idea",
        ".next",
        "target",
    ):
        assert rules.is_default_ignored_dir(name), name
    assert not rules.is_default_ignored_dir("docs")
    assert rules.max_file_bytes == 50 * 1024 * 1024


def test_undecodable_names_are_skipped_and_the_rest_is_kept(tmp_path: Path) -> None:
    """Issue 26 item 3: one non-UTF-8 name (a file, or a folder and all below it) is reported
    with its bytes escaped; it never fails the folder."""
    root = tmp_path / "bn"
    write(root, "good.txt", "good")
    raw = os.fsencode(root)
    with open(raw + b"/bad\xff.txt", "wb") as fh:
        fh.write(b"x")
    os.mkdir(raw + b"/dir\xfe")
    with open(raw + b"/dir\xfe/inside.txt", "wb") as fh:
        fh.write(b"y")
    found = expand(root, IgnoreRules(), is_supported=is_supported)
    assert [f.rel for f in found.files] == ["good.txt"]
    assert found.skip_report()["undecodable_name"] == {
        "count": 2,
        "files": ["bad\\xff.txt", "dir\\xfe"],
    }
    assert all(s.rel.encode("utf-8") for s in found.skipped)  # storable as text


def test_text_files_of_any_name_are_taken_binary_ones_skipped(tmp_path: Path) -> None:
    """Issue 41: /usr/share/doc's licences, READMEs and changelogs are text without a known
    extension; they are taken by content. A binary file without extension is still skipped."""
    import gzip

    write(tmp_path, "common-licenses/GPL-3", "GNU GENERAL PUBLIC LICENSE\nVersion 3\n")
    write(tmp_path, "pkg/README.Debian", "Notes for Debian users.\n")
    write(tmp_path, "pkg/pkg.copyright", "Format: https://www.debian.org/doc/\n")
    (tmp_path / "pkg/changelog.Debian.gz").write_bytes(gzip.compress(b"pkg (1.0) unstable\n"))
    write(tmp_path, "pkg/program", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    write(tmp_path, "pkg/archive.tar.gz", gzip.compress(b"a.txt\x00\x00\x00" * 40))
    result = expand(tmp_path, RULES, is_supported=is_supported)
    assert sorted(f.rel for f in result.files) == [
        "common-licenses/GPL-3",
        "pkg/README.Debian",
        "pkg/changelog.Debian.gz",
        "pkg/pkg.copyright",
    ]
    assert {s.rel: s.reason for s in result.skipped} == {
        "pkg/archive.tar.gz": "unsupported_type",
        "pkg/program": "unsupported_type",
    }


def test_as_text_globs_take_files_whatever_they_hold(tmp_path: Path) -> None:
    write(tmp_path, "dump.dat", b"\x00\x01 record")
    write(tmp_path, "logs/x.bin", b"\x00\x02")
    result = expand(tmp_path, RULES, is_supported=is_supported, as_text=("*.dat", "logs/*"))
    assert [(f.rel, f.as_text) for f in result.files] == [("dump.dat", True), ("logs/x.bin", True)]
