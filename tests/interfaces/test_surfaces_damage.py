"""Nothing silent on the surfaces (issue 26 items 1–3): the real ``kb`` in a subprocess, a real
``kb serve`` and a server over loopback, on damaged catalogs and indexes, odd file names,
symlink loops. Every refusal is a coded message with a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from _serve import kb_serve
from knowbase.interfaces.http import create_app
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import Settings

pytestmark = pytest.mark.timeout(120)


def kb_cli(home: Path, *args: str | bytes) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KNOWBASE_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def refused(proc: subprocess.CompletedProcess[str], code: str) -> None:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert f"{code}:" in proc.stderr, proc.stderr


@pytest.fixture
def used_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    with Knowledge(Settings(home=home, test_providers=True)) as kb:
        kb.create_base("docs", file_processor_id=None)
        kb.add("docs", [AddInput.note("otters hold hands while they sleep")], wait=True)
    for extra in home.glob("catalog.sqlite-*"):
        extra.unlink()
    return home


@pytest.mark.parametrize("damage", ["zero-length", "random-bytes", "truncated"])
def test_every_command_on_a_damaged_catalog_prints_a_code(used_home: Path, damage: str) -> None:
    catalog = used_home / "catalog.sqlite"
    data = catalog.read_bytes()
    catalog.write_bytes(
        {"zero-length": b"", "random-bytes": os.urandom(len(data)), "truncated": data[:5000]}[
            damage
        ]
    )
    for args in (
        ("base", "list"),
        ("search", "docs", "otters"),
        ("add", "docs", "--note", "more about otters", "--no-wait"),
        ("status", "docs"),
        ("status",),
    ):
        proc = kb_cli(used_home, *args)
        assert proc.returncode == 1, (args, proc.stderr)
        assert "Traceback" not in proc.stderr + proc.stdout, (args, proc.stderr)
        assert "catalog_unavailable" in proc.stderr + proc.stdout, (args, proc.stderr)
    assert catalog.stat().st_size == {"zero-length": 0, "random-bytes": len(data)}.get(damage, 5000)


def test_a_zero_length_index_is_unavailable_not_empty(used_home: Path) -> None:
    (index,) = (used_home / "bases").glob("*/.kb/index.sqlite")
    for extra in index.parent.glob("index.sqlite-*"):
        extra.unlink()
    index.write_bytes(b"")
    status = kb_cli(used_home, "status", "--json")
    report = json.loads(status.stdout)
    (row,) = [c for c in report["components"] if c["component"] == "index"]
    assert row["status"] == "unavailable"
    assert "is empty" in row["reason"] and "kb base restore" in row["reason"]
    assert report["status"] != "ready"
    refused(kb_cli(used_home, "search", "docs", "otters"), "base_failed")
    assert index.stat().st_size == 0  # not recreated empty


def test_kb_serve_starts_on_a_damaged_catalog_and_status_says_why(used_home: Path) -> None:
    (used_home / "catalog.sqlite").write_bytes(b"")
    with kb_serve(used_home) as url:
        report = httpx.get(url + "/status", timeout=30).json()
        assert report["status"] == "unavailable"
        assert "catalog_unavailable" in report["components"][0]["reason"]
        listed = httpx.get(url + "/bases", timeout=30)
        assert listed.status_code == 503 and listed.json()["code"] == "catalog_unavailable"


def test_damage_under_a_running_server_stops_status_saying_ready(
    used_home: Path, live_server
) -> None:  # type: ignore[no-untyped-def]
    with Knowledge(Settings(home=used_home, test_providers=True)) as kb:
        url = live_server(create_app(kb))
        assert httpx.get(url + "/status", timeout=30).json()["status"] == "ready"
        catalog = used_home / "catalog.sqlite"
        catalog.write_bytes(os.urandom(catalog.stat().st_size))
        report = httpx.get(url + "/status", timeout=30).json()
        assert report["status"] == "unavailable"
        found = httpx.post(url + "/bases/docs/search", json={"query": "otters"}, timeout=30)
        assert found.status_code == 503, found.text
        assert found.json()["code"] == "catalog_unavailable"


def test_an_undecodable_name_fails_only_that_file(tmp_path: Path) -> None:
    home, folder = tmp_path / "home", tmp_path / "bn"
    folder.mkdir()
    (folder / "good.txt").write_text("good otters", encoding="utf-8")
    bad = os.fsencode(folder) + b"/bad\xff.txt"
    with open(bad, "wb") as fh:
        fh.write(b"x")
    assert kb_cli(home, "base", "create", "bn").returncode == 0
    added = kb_cli(home, "add", "bn", str(folder), "--json")
    assert added.returncode == 0, added.stderr
    assert "Traceback" not in added.stderr
    status = json.loads(kb_cli(home, "status", "bn", "--json").stdout)
    assert status["counts"] == {"completed": 1}  # good.txt (files are counted: issue 42)
    (skips,) = status["skipped"].values()
    assert skips["undecodable_name"] == {"count": 1, "files": ["bad\\xff.txt"]}
    found = json.loads(kb_cli(home, "search", "bn", "otters", "--json").stdout)
    assert [r["concept_id"] for r in found["results"]] == ["bn/good.txt"]
    refused(
        subprocess.run(
            [sys.executable, "-m", "knowbase.interfaces.cli", "add", "bn", bad],
            capture_output=True,
            text=True,
            env={**os.environ, "KNOWBASE_HOME": str(home)},
            timeout=120,
        ),
        "undecodable_name",
    )


def test_a_symlink_loop_named_on_the_cli_is_a_coded_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert kb_cli(home, "base", "create", "b").returncode == 0
    refused(kb_cli(home, "add", "b", str(loop)), "invalid_input")
