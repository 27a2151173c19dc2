"""The caption processor as a base setting (issue 28): ``kb base create/set/show``, ``POST`` and
``PATCH /bases``, and an archive's manifest carry ``caption:<profile>:<model>`` as they carry
``tesseract``; a profile the home does not know is refused with ``invalid_input``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowbase.interfaces.cli import app
from knowbase.service import Knowledge
from knowbase.settings import load_settings

pytestmark = pytest.mark.timeout(120)

CAPTION = "caption:vis:qwen2.5-vl-7b-instruct"


def _home(path: Path) -> Path:
    path.mkdir()
    # never called here: these tests only store the setting
    (path / "config.toml").write_text(
        '[providers.vis]\nbase_url = "http://127.0.0.1:9/v1"\n', encoding="utf-8"
    )
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return _home(tmp_path / "home")


def _kb(runner: CliRunner, home: Path, *args: str) -> dict:
    done = runner.invoke(app, [*args, "--home", str(home), "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_cli_create_set_show(home: Path) -> None:
    runner = CliRunner()
    made = _kb(runner, home, "base", "create", "figs", "--processor", CAPTION)
    assert made["file_processor_id"] == CAPTION
    assert _kb(runner, home, "base", "show", "figs")["file_processor_id"] == CAPTION
    assert (
        _kb(runner, home, "base", "set", "figs", "--processor", "none")["file_processor_id"] is None
    )
    again = _kb(runner, home, "base", "set", "figs", "--processor", "tesseract")
    assert again["file_processor_id"] == "tesseract"
    assert _kb(runner, home, "base", "set", "figs", "--processor", CAPTION)[
        "file_processor_id"
    ] == (CAPTION)
    refused = subprocess.run(  # the real CLI's error edge: code, message, exit status
        [sys.executable, "-m", "knowbase.interfaces.cli", "base", "set", "figs"]
        + ["--processor", "caption:nope:m", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1 and "invalid_input" in refused.stderr, refused.stderr
    assert "no provider profile 'nope'" in refused.stderr
    assert _kb(runner, home, "base", "show", "figs")["file_processor_id"] == CAPTION


def test_http_create_and_patch(home: Path) -> None:
    from fastapi.testclient import TestClient

    from knowbase.interfaces.http import create_app

    with Knowledge(load_settings(home)) as kb:
        client = TestClient(create_app(kb), base_url="http://127.0.0.1")
        r = client.post("/bases", json={"name": "figs", "file_processor_id": CAPTION})
        assert r.status_code in (200, 201), r.text
        assert r.json()["file_processor_id"] == CAPTION
        r = client.patch("/bases/figs", json={"file_processor_id": "tesseract"})
        assert r.status_code == 200 and r.json()["file_processor_id"] == "tesseract"
        r = client.patch("/bases/figs", json={"file_processor_id": CAPTION})
        assert r.status_code == 200 and r.json()["file_processor_id"] == CAPTION
        for bad in ("caption:vis", "easyocr", "caption:nope:m"):
            r = client.patch("/bases/figs", json={"file_processor_id": bad})
            assert r.status_code == 422, (bad, r.text)
        assert client.get("/bases/figs").json()["file_processor_id"] == CAPTION


def test_archive_round_trip_keeps_the_processor(home: Path, tmp_path: Path) -> None:
    archive = tmp_path / "figs.kbz"
    with Knowledge(load_settings(home)) as kb:
        kb.create_base("figs", file_processor_id=CAPTION)
        kb.add_note("figs", "a note so the archive holds something")
        kb.export_base("figs", archive)
    with Knowledge(load_settings(_home(tmp_path / "other"))) as other:
        assert other.import_base(archive).base.file_processor_id == CAPTION
    bare = tmp_path / "bare"
    bare.mkdir()
    with Knowledge(load_settings(bare)) as kb:  # no [providers.vis] here
        with pytest.raises(Exception) as exc:
            kb.import_base(archive)
        assert getattr(exc.value, "code", None) == "invalid_input" and "vis" in str(exc.value)
        assert kb.list_bases() == []
