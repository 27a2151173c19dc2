"""``kb add --tag/--meta``, ``kb search --tag/--where`` and ``kb label``, as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def kb_run(tmp_path: Path):
    env = {**os.environ, "KNOWBASE_HOME": str(tmp_path / "home")}

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "knowbase.interfaces.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kb {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    return run


def found(run, *args: str) -> list[str]:
    out = json.loads(run("search", "docs", "alpaca", "--json", *args).stdout)
    return sorted(r["concept_id"] for r in out["results"])


def test_labels_from_add_to_search_and_changed_with_kb_label(kb_run, tmp_path: Path) -> None:
    team = tmp_path / "team"
    (team / "infra").mkdir(parents=True)
    (team / "infra" / "vpn.md").write_text("Alpaca VPN keys rotate weekly.\n")
    (team / "bread.md").write_text("Alpaca sourdough bread.\n")
    (tmp_path / "wool.md").write_text("Alpaca wool is warm.\n")
    kb_run("base", "create", "docs")
    kb_run("add", "docs", str(team), "--tag", "team,internal", "--meta", "year=2024")
    kb_run("add", "docs", str(tmp_path / "wool.md"), "--meta", "year=2019", "--meta", "lang=en")
    assert found(kb_run, "--tag", "team") == ["team/bread.md", "team/infra/vpn.md"]
    assert found(kb_run, "--where", "year<2020") == ["wool.md"]
    assert found(kb_run, "--where", "lang in en,de", "--where", "year>=2019") == ["wool.md"]

    out = json.loads(kb_run("label", "docs", "team/infra", "--tag", "ops", "--json").stdout)
    assert out["tags"] == ["ops"]
    assert found(kb_run, "--tag", "ops") == ["team/infra/vpn.md"]
    shown = kb_run("label", "docs", "wool.md").stdout
    assert "year=2019" in shown and "lang=en" in shown
    kb_run("label", "docs", "wool.md", "--unset", "year", "--tag", "fibre")
    assert found(kb_run, "--where", "year<2020") == []
    assert found(kb_run, "--tag", "fibre") == ["wool.md"]

    # re-adding the folder with a new tag updates it (no copy) and adds the tag
    kb_run("add", "docs", str(team), "--tag", "again")
    assert found(kb_run, "--tag", "again") == ["team/bread.md", "team/infra/vpn.md"]


def test_bad_labels_and_conditions_are_clear_errors(kb_run, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("alpaca")
    kb_run("base", "create", "docs")
    bad = kb_run("add", "docs", str(tmp_path / "a.md"), "--meta", "novalue", check=False)
    assert bad.returncode == 1 and "invalid_input" in bad.stderr
    bad = kb_run("search", "docs", "alpaca", "--where", "no operator here", check=False)
    assert bad.returncode == 1 and "invalid_filter" in bad.stderr
    bad = kb_run("label", "docs", "missing.md", "--tag", "x", check=False)
    assert bad.returncode == 1 and "not_found" in bad.stderr
