"""``kb base set-embedding`` (CLI, JSON) and ``POST /bases/{base}/embedding-model`` +
``GET /bases/{base}/model-switch`` over HTTP (issue 15 item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowbase.interfaces.cli import app
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


def test_cli_set_embedding_switches_and_reports(kb: Knowledge, home: Path) -> None:
    base = kb.create_base("sw", embedding_model_id="hash:d32", file_processor_id=None)
    kb.add(base.id, [AddInput.note(f"note {i}") for i in range(3)], wait=True)
    kb.close()
    runner = CliRunner()
    r = runner.invoke(
        app, ["base", "set-embedding", "sw", "hash:d48", "--home", str(home), "--json"]
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["switch"]["status"] == "completed" and out["switch"]["to_model"] == "hash:d48"
    assert (out["base"]["embedding_model_id"], out["base"]["dimensions"]) == ("hash:d48", 48)
    assert out["switch"]["progress"]["done"] == 3
    same = runner.invoke(app, ["base", "set-embedding", "sw", "hash:d48", "--home", str(home)])
    assert same.exit_code != 0 and "already uses" in str(same.exception)


def test_cli_set_embedding_no_wait_leaves_the_old_model_serving(kb: Knowledge, home: Path) -> None:
    base = kb.create_base("sw", embedding_model_id="hash:d32", file_processor_id=None)
    kb.add_note(base.id, "one note")
    kb.close()
    r = CliRunner().invoke(
        app, ["base", "set-embedding", "sw", "hash:d48", "--no-wait", "--home", str(home), "--json"]
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["switch"]["status"] == "pending"
    assert out["base"]["embedding_model_id"] == "hash:d32"


def test_http_switch_routes(kb: Knowledge) -> None:
    from fastapi.testclient import TestClient

    from knowbase.interfaces.http import create_app

    base = kb.create_base("sw", embedding_model_id="hash:d32", file_processor_id=None)
    kb.add_note(base.id, "one note")
    client = TestClient(create_app(kb), base_url="http://127.0.0.1")
    assert client.get("/bases/sw/model-switch").status_code == 404
    r = client.post("/bases/sw/embedding-model", json={"embedding_model_id": "hash:d48"})
    assert r.status_code == 202, r.text
    assert r.json()["status"] == "pending" and r.json()["from_model"] == "hash:d32"
    again = client.post("/bases/sw/embedding-model", json={"embedding_model_id": "hash:d16"})
    assert again.status_code == 409 and again.json()["code"] == "conflict"
    kb.run_until_idle(timeout_s=30)
    status = client.get("/bases/sw/model-switch").json()
    assert status["status"] == "completed" and status["progress"]["done"] == 1
    assert client.get("/bases/sw").json()["dimensions"] == 48
    bad = client.post("/bases/sw/embedding-model", json={"embedding_model_id": "nope:x"})
    assert bad.status_code == 422
