"""``kb keys create|list|revoke`` and ``kb jobs --by``: the real ``kb`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from knowbase.interfaces.cli.keys import parse_expiry
from knowbase.service import Knowledge
from knowbase.settings import load_settings

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def run(tmp_path: Path):  # noqa: ANN201 - a callable, as in test_cli.py
    env = {**os.environ, "KNOWBASE_HOME": str(tmp_path / "home")}

    def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "knowbase.interfaces.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kb {' '.join(args)} failed: {proc.stderr}")
        return proc

    return _run


def test_keys_lifecycle(run, tmp_path: Path) -> None:
    run("base", "create", "a")
    run("base", "create", "b")
    made = json.loads(
        run("keys", "create", "agent", "--bases", "a,b", "--read-only", "--json").stdout
    )
    assert made["token"].startswith("kb_") and made["access"] == "read"
    assert made["bases"] == ["a", "b"]
    human = run("keys", "create", "ci", "--write", "--expires", "2099-01-31").stdout
    assert "write on every base, until 2099-01-31 00:00 UTC" in human
    token = human.strip().splitlines()[-1]
    assert token.startswith("kb_")

    listed = run("keys", "list", "--json").stdout
    assert made["token"] not in listed and token not in listed  # shown once, never again
    rows = {k["name"]: k for k in json.loads(listed)}
    assert rows["agent"]["state"] == rows["ci"]["state"] == "active"
    assert rows["agent"]["bases"] == ["a", "b"] and rows["ci"]["bases"] is None

    assert "revoked key agent" in run("keys", "revoke", "agent").stdout
    assert json.loads(run("keys", "list", "--json").stdout)[0]["state"] == "revoked"
    again = run("keys", "create", "agent", "--read-only", check=False)
    assert again.returncode == 1 and "key_exists" in again.stderr
    both = run("keys", "create", "x", "--read-only", "--write", check=False)
    assert both.returncode == 1 and "--read-only or --write" in both.stderr
    nowhere = run("keys", "create", "x", "--bases", "nope", "--write", check=False)
    assert nowhere.returncode == 1 and "not_found" in nowhere.stderr

    # kb jobs --by: what a key asked for, with the surface it came through
    with Knowledge(load_settings(tmp_path / "home")) as kb, kb.acting_as("ci", "http"):
        kb.add_note("a", "Owls hunt at night.", wait=False)
    jobs = json.loads(run("jobs", "--by", "ci", "--all", "--json").stdout)
    assert jobs and {(j["by_key"], j["by_surface"]) for j in jobs} == {("ci", "http")}
    assert json.loads(run("jobs", "--by", "agent", "--all", "--json").stdout) == []
    assert "by ci via http" in run("jobs", "--by", "ci", "--all").stdout


def test_parse_expiry() -> None:
    assert parse_expiry("2027-01-31") == parse_expiry("2027-01-31T00:00:00+00:00")
    assert parse_expiry("2027-01-31T10:00:00+02:00") == parse_expiry("2027-01-31T08:00:00Z")
    with pytest.raises(Exception, match="--expires takes"):
        parse_expiry("next tuesday")
