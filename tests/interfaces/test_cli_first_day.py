"""Issue 42: the first day with ``kb`` (the real CLI in a subprocess, as a user drives it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def run(tmp_path):
    env = {**os.environ, "KNOWBASE_HOME": str(tmp_path / "home"), "COLUMNS": "200"}

    def _run(*args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "knowbase.interfaces.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode in ok, f"kb {' '.join(args)} -> {proc.returncode}: {proc.stderr}"
        return proc

    return _run


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A folder with a sub-folder: a policy, a memo and notes."""
    root = tmp_path / "corpus"
    (root / "office").mkdir(parents=True)
    (root / "notes" / "it").mkdir(parents=True)
    (root / "office" / "travel.md").write_text(
        "# Travel policy\n\nBook trains for trips under four hours. Walruses travel free.\n",
        "utf-8",
    )
    (root / "office" / "memo.txt").write_text("The memo mentions otters.", "utf-8")
    (root / "notes" / "it" / "vpn.md").write_text("# VPN\n\nConnect with the client.\n", "utf-8")
    return root


def test_a_file_inside_an_added_folder_updates_its_item(run, corpus: Path) -> None:
    """Item 3: adding a file the base holds inside a folder updates it; no second copy."""
    run("base", "create", "b")
    run("add", "b", str(corpus))
    travel = corpus / "office" / "travel.md"
    travel.write_text(
        "# Travel policy\n\nBook trains for trips under five hours. Walruses travel free.\n",
        "utf-8",
    )
    again = json.loads(run("add", "b", str(travel), "--json").stdout)
    assert again["items"] == []
    assert [u["concept_id"] for u in again["updated"]] == ["corpus/office/travel.md"]
    assert again["update"]["changed"] == 1
    tree = json.loads(run("tree", "b", "--json").stdout)["nodes"]
    assert [n["title"] for n in tree if n["depth"] == 0] == [str(corpus)]
    hits = json.loads(run("search", "b", "walruses", "--json").stdout)["results"]
    assert [h["concept_id"] for h in hits] == ["corpus/office/travel.md"]
    assert "five hours" in hits[0]["text"]


def test_identical_passages_are_listed_once(run, corpus: Path, tmp_path: Path) -> None:
    """Item 3: the same passage held by two items shows once in a result list."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "travel-copy.md").write_bytes((corpus / "office" / "travel.md").read_bytes())
    run("base", "create", "b")
    run("add", "b", str(corpus), str(other / "travel-copy.md"))
    hits = json.loads(run("search", "b", "walruses", "--json").stdout)["results"]
    assert len(hits) == 1
