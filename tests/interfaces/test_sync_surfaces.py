"""``kb sync`` over the CLI (JSON report) and ``POST /bases/{base}/sync`` over loopback HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowbase.catalog.models import Base
from knowbase.ingestion.inputs import AddInput
from knowbase.interfaces.cli import app
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


def test_cli_sync_json_and_dry_run(
    kb: Knowledge, bm25_base: Base, home: Path, tmp_path: Path
) -> None:
    root = tmp_path / "d"
    root.mkdir()
    (root / "a.md").write_text("alpha", encoding="utf-8")
    kb.add(bm25_base.id, [AddInput.directory(root)], wait=True)
    (root / "b.md").write_text("bravo", encoding="utf-8")
    kb.close()
    runner = CliRunner()
    dry = runner.invoke(app, ["sync", "bm25", "--home", str(home), "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    report = json.loads(dry.stdout)
    assert report["dry_run"] and [a["path"] for a in report["added"]] == [str(root / "b.md")]
    assert report["job_id"] is None
    done = runner.invoke(app, ["sync", "bm25", "--home", str(home), "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["job_id"]
    again = runner.invoke(app, ["sync", "bm25", "--home", str(home), "--json"])
    assert json.loads(again.stdout)["added"] == []


def test_http_sync_route(kb: Knowledge, bm25_base: Base, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from knowbase.interfaces.http import create_app

    root = tmp_path / "d"
    root.mkdir()
    (root / "a.md").write_text("alpha", encoding="utf-8")
    kb.add(bm25_base.id, [AddInput.directory(root)], wait=True)
    (root / "a.md").unlink()
    client = TestClient(create_app(kb), base_url="http://127.0.0.1")
    r = client.post("/bases/bm25/sync", params={"dry_run": True, "prune": True})
    assert r.status_code == 202, r.text
    assert [v["deleted"] for v in r.json()["vanished"]] == [True]
    assert len([i for i in kb.list_items(bm25_base.id) if i.type == "file"]) == 1
