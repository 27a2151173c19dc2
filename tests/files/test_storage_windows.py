"""Windows host containment (§2.3 step 3), checked on any OS through PureWindowsPath roots."""

from __future__ import annotations

import ntpath
from pathlib import PureWindowsPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowbase.errors import UnsafePath
from knowbase.files import choose_directory_prefix, host_relative_check, validate_relative_path

ROOT = PureWindowsPath(r"C:\Users\u\knowbase\bases\b\raw")


@pytest.mark.parametrize(
    "rel",
    [
        r"..\outside.pdf",
        r"a\..\..\x.pdf",
        r"a\..",
        r"..",
        r"C:\Windows\x.pdf",
        r"D:x.pdf",
        r"\\server\share\x",
        "a/../../x",
    ],
)
def test_windows_rejects_escapes(rel):
    with pytest.raises(UnsafePath, match="on this platform"):
        host_relative_check(ROOT, rel)


@pytest.mark.parametrize("rel", [r"a\b.pdf", r"a\b\..\c.pdf", "docs/a.md", ".kb\\x", "a/b\\c"])
def test_windows_allows_inside(rel):
    host_relative_check(ROOT, rel)


def test_windows_posix_valid_but_host_unsafe():
    # The POSIX schema accepts this single name; only the host check stops it on Windows.
    assert validate_relative_path(r"..\outside.pdf") == r"..\outside.pdf"
    with pytest.raises(UnsafePath):
        host_relative_check(ROOT, r"..\outside.pdf")


def test_windows_case_insensitive_root():
    # A path that climbs out and back in with different casing is still inside.
    host_relative_check(ROOT, r"..\RAW\x.pdf")


def test_windows_drive_root_as_material_root():
    host_relative_check(PureWindowsPath("C:\\"), "x.pdf")
    with pytest.raises(UnsafePath):
        host_relative_check(PureWindowsPath("C:\\"), ".")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("C:\\", "C"),
        ("d:/", "d"),
        (r"C:\Users\u\Docs", "Docs"),
        (r"C:\Users\u\Docs\\", "Docs"),
        (r"\\server\share\\", "root"),
    ],
)
def test_directory_prefix_windows_sources(source, expected):
    assert choose_directory_prefix(source, [], pathmod=ntpath) == expected


@settings(max_examples=300)
@given(st.lists(st.sampled_from(list("ab.\\/:C") + [".."]), max_size=12).map("".join))
def test_windows_host_check_property(rel):
    try:
        host_relative_check(ROOT, rel)
    except UnsafePath:
        return
    target = ntpath.normpath(ntpath.join(str(ROOT), rel)).lower()
    assert target.startswith(str(ROOT).lower() + "\\")
