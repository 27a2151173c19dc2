"""``kb sync`` over the CLI (JSON report) and ``POST /bases/{base}/sync`` over loopback HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowbase.catalog.models import Base
from knowbase.interfaces.cli import app
from knowbase.operations.add.inputs import AddInput
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


def test_sync_settings_are_set_by_cli_and_http(kb: Knowledge, bm25_base: Base, home: Path) -> None:
    """sync_deletes and url_max_age reach the base from ``kb base set`` and ``PATCH /bases``."""
    from fastapi.testclient import TestClient

    from knowbase.interfaces.http import create_app

    kb.close()
    runner = CliRunner()
    args = ["base", "set", "bm25", "--home", str(home), "--json"]
    done = runner.invoke(app, [*args, "--sync-deletes", "--url-max-age", "3600"])
    assert done.exit_code == 0, done.output
    assert (json.loads(done.stdout)["sync_deletes"], json.loads(done.stdout)["url_max_age"]) == (
        True,
        3600,
    )
    done = runner.invoke(app, [*args, "--no-sync-deletes", "--url-max-age", "-1"])
    assert done.exit_code == 0, done.output
    assert (json.loads(done.stdout)["sync_deletes"], json.loads(done.stdout)["url_max_age"]) == (
        False,
        None,
    )
    with Knowledge(kb.settings) as again:
        client = TestClient(create_app(again), base_url="http://127.0.0.1")
        r = client.patch("/bases/bm25", json={"sync_deletes": True, "url_max_age": 60})
        assert r.status_code == 200, r.text
        assert (r.json()["sync_deletes"], r.json()["url_max_age"]) == (True, 60)
        assert again.get_base("bm25").url_max_age == 60
        assert client.patch("/bases/bm25", json={"url_max_age": -5}).status_code == 422


def test_index_backend_is_chosen_at_create_by_cli_and_http(kb: Knowledge, home: Path) -> None:
    """``kb base create --index-backend`` and ``POST /bases {index_backend}``; a backend the
    home cannot serve is refused with its code and leaves no base behind."""
    pytest.importorskip("qdrant_client")
    from fastapi.testclient import TestClient

    from knowbase.index import backends
    from knowbase.interfaces.http import create_app

    on_pg = kb.settings.database_url is not None
    kb.close()
    try:
        runner = CliRunner()
        base = ["base", "create", "--home", str(home), "--json"]
        done = runner.invoke(
            app, [*base, "q1", "--embedding", "hash:d8", "--index-backend", "qdrant"]
        )
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["index_backend"] == "qdrant"
        with Knowledge(kb.settings) as again:
            client = TestClient(create_app(again), base_url="http://127.0.0.1")
            r = client.post(
                "/bases",
                json={"name": "q2", "embedding_model_id": "hash:d8", "index_backend": "qdrant"},
            )
            assert r.status_code == 201, r.text
            assert r.json()["index_backend"] == "qdrant"
            assert (
                client.post("/bases", json={"name": "q3", "index_backend": "faiss"}).status_code
                == 422
            )
            if not on_pg:  # the postgres backend needs the catalog on PostgreSQL: a 422
                r = client.post("/bases", json={"name": "q4", "index_backend": "postgres"})
                assert (r.status_code, r.json()["code"]) == (422, "invalid_input")
                assert [b.name for b in again.list_bases()].count("q4") == 0
            assert client.get("/bases/q1").json()["index_backend"] == "qdrant"
    finally:
        backends.close_qdrant_clients()
