"""Issue 41 item 4 through the real ``kb``: a /usr/share/doc-like folder is read by content,
every skipped file is named, and ``--as-text`` forces text reading."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)


def kb(home: Path, *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KNOWBASE_HOME": str(home), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert proc.returncode in ok, f"kb {' '.join(args)} -> {proc.returncode}: {proc.stderr}"
    return proc


def test_doc_folder_is_read_by_content_and_skips_are_named(tmp_path: Path) -> None:
    doc = tmp_path / "doc"
    (doc / "common-licenses").mkdir(parents=True)
    (doc / "pkg").mkdir()
    (doc / "common-licenses" / "GPL-3").write_text("GNU copyleft for tardigrades\n", "utf-8")
    (doc / "pkg" / "README.Debian").write_text("Debian notes about axolotls\n", "utf-8")
    (doc / "pkg" / "pkg.copyright").write_text("Copyright holders: pangolins\n", "utf-8")
    (doc / "pkg" / "changelog.Debian.gz").write_bytes(gzip.compress(b"Fixed the narwhal bug\n"))
    for i in range(7):  # more than the five a skip report used to name
        (doc / "pkg" / f"program{i}").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(64))
    (doc / "pkg" / "records.dat").write_bytes(b"okapi record\x00\x01\n")
    home = tmp_path / "home"
    kb(home, "base", "create", "d")
    out = kb(home, "add", "d", str(doc), "--as-text", "*.dat").stdout
    assert "5 indexed" in out and "7 skipped (unsupported_type 7)" in out, out
    for i in range(7):
        assert f"skipped unsupported_type: {doc}/pkg/program{i}" in out, out
    for word in ("tardigrades", "axolotls", "pangolins", "narwhal", "okapi"):
        hits = json.loads(kb(home, "search", "d", word, "--json").stdout)
        assert hits["results"], word
