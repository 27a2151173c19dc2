"""Readiness per component: real homes, a real loopback HTTP endpoint, a corrupted index."""

from __future__ import annotations

import dataclasses
import http.server
import importlib.util
import json
import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from knowbase.errors import VectorStoreUnavailable
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.service.readiness import check_embedding, check_rerank, overall, readiness
from knowbase.settings import load_settings

pytestmark = pytest.mark.timeout(60)


def component(report: dict, name: str, base_id: str | None = None) -> dict:
    return next(
        c
        for c in report["components"]
        if c["component"] == name and (base_id is None or c.get("base_id") == base_id)
    )


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[Knowledge]:
    with Knowledge(load_settings(tmp_path / "home")) as kb:
        yield kb


def test_a_fresh_home_is_ready_and_the_report_is_json(kb: Knowledge) -> None:
    report = readiness(kb)
    assert report["status"] == "ready"
    assert [c["component"] for c in report["components"]] == [
        "catalog",
        "file_processor",
        "workers",
    ]
    assert json.loads(json.dumps(report)) == report
    workers = component(report, "workers")
    assert workers["reason"] == "no worker running; nothing queued"


def test_workers_queued_without_a_worker_then_running(kb: Knowledge) -> None:
    base = kb.create_base("docs", embedding_model_id="hash:d64")
    kb.add("docs", [AddInput.note("queued while nobody works")])
    report = readiness(kb)
    workers = component(report, "workers")
    assert workers["status"] == "degraded"
    assert workers["reason"].startswith("queued, no worker running")
    assert workers["details"]["pending"] == 1
    assert report["status"] == "degraded"
    for name in ("index", "embedding", "rerank"):
        assert component(report, name, base.id)["status"] == "ready"

    kb.start_workers()
    try:
        kb.run_until_idle(timeout_s=30)
        report = readiness(kb)
        workers = component(report, "workers")
        assert workers["status"] == "ready"
        assert len(workers["details"]["workers"]) >= 1
        assert workers["details"]["pending"] == 0
        assert report["status"] == "ready"
    finally:
        kb.stop_workers()


def test_a_corrupted_index_is_unavailable_and_searches_refuse(kb: Knowledge) -> None:
    base = kb.create_base("docs")
    kb.add("docs", [AddInput.note("soon unreadable")], wait=True)
    kb.rt.close_store(base.id)
    index = kb.rt.storage(base.id).index_path
    for extra in index.parent.glob(index.name + "-*"):
        extra.unlink()
    index.write_bytes(b"garbage, not sqlite" * 200)

    with pytest.raises(VectorStoreUnavailable) as err:
        kb.search("docs", "unreadable")
    assert err.value.status == 503

    report = readiness(kb)
    index_status = component(report, "index", base.id)
    assert index_status["status"] == "unavailable"
    assert "failed" in index_status["reason"] or "vector_store" in index_status["reason"]
    assert report["status"] == "degraded"  # other bases and the catalog still work


def test_readiness_mounts_a_corrupt_index_itself(kb: Knowledge) -> None:
    base = kb.create_base("docs")
    kb.rt.close_store(base.id)
    kb.rt.storage(base.id).index_path.write_bytes(b"\x00garbage" * 500)
    index_status = component(readiness(kb), "index", base.id)
    assert index_status["status"] == "unavailable"
    assert index_status["reason"].startswith("vector_store_unavailable")


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_profiles_are_probed_cheaply(tmp_path: Path, endpoint: str, monkeypatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[providers.up]\nbase_url = "{endpoint}"\n\n'
        f'[providers.keyed]\nbase_url = "{endpoint}"\napi_key_env = "KB_TEST_NO_SUCH_KEY"\n\n'
        f'[providers.down]\nbase_url = "http://127.0.0.1:{_closed_port()}/v1"\n',
        encoding="utf-8",
    )
    monkeypatch.delenv("KB_TEST_NO_SUCH_KEY", raising=False)
    with Knowledge(load_settings(home)) as kb:
        base = kb.create_base("docs")
        cache: dict = {}

        def embedding(model_id: str) -> dict:
            b = dataclasses.replace(base, embedding_model_id=model_id, dimensions=8)
            return check_embedding(kb, b, cache)

        up = embedding("up:m")
        assert up["status"] == "ready" and "HTTP 404" in up["reason"]
        assert embedding("keyed:m")["status"] == "degraded"
        down = embedding("down:m")
        assert down["status"] == "unavailable" and "unreachable" in down["reason"]
        assert embedding("nowhere:m")["status"] == "unavailable"
        assert embedding("no-colon")["status"] == "unavailable"
        assert embedding("hash:d8")["status"] == "ready"

        rerank = check_rerank(kb, dataclasses.replace(base, rerank_model_id="down:r"), cache)
        assert rerank["status"] == "unavailable"
        assert (
            check_rerank(kb, dataclasses.replace(base, rerank_model_id="hash:r"), cache)["status"]
            == "ready"
        )
        assert check_rerank(kb, base, cache)["status"] == "ready"


def test_local_model_is_checked_without_loading_weights(kb: Knowledge) -> None:
    if importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("the local extra is not installed")
    heavy_before = {"torch", "onnxruntime"} & set(sys.modules)
    base = kb.create_base("docs")
    b = dataclasses.replace(base, embedding_model_id="local:all-minilm-l6-v2", dimensions=384)
    result = check_embedding(kb, b, {})
    assert result["status"] == "ready", result
    assert "local model files at" in result["reason"]
    assert "ONNX" in result["reason"]  # exported already, or on first use
    assert not ({"torch", "onnxruntime"} & set(sys.modules)) - heavy_before
    other = dataclasses.replace(b, embedding_model_id="local:other-model")
    assert check_embedding(kb, other, {})["status"] == "unavailable"


def test_overall_status() -> None:
    def c(name: str, status: str) -> dict:
        return {"component": name, "status": status, "reason": ""}

    assert overall([c("catalog", "ready"), c("workers", "ready")]) == "ready"
    assert overall([c("catalog", "ready"), c("index", "unavailable")]) == "degraded"
    assert overall([c("catalog", "ready"), c("workers", "degraded")]) == "degraded"
    assert overall([c("catalog", "unavailable")]) == "unavailable"


def test_pending_jobs_are_counted_not_loaded(kb: Knowledge) -> None:
    """More pending jobs than the old 10,000-row read: the count is exact (SQL COUNT)."""
    import sqlalchemy as sa

    from knowbase.catalog.schema import job as job_t
    from knowbase.ids import new_time_id

    rows = [
        {
            "id": new_time_id(),
            "kind": "knowledge.delete-subtree",
            "queue": "base.none",
            "payload": "{}",
            "status": "pending",
            "run_at": 0,
            "created_at": 0,
            "updated_at": 0,
        }
        for _ in range(10_001)
    ]
    with kb.rt.catalog.write_tx() as conn:
        conn.execute(sa.insert(job_t), rows)
    workers = component(readiness(kb), "workers")
    assert workers["details"]["pending"] == 10_001


def test_live_workers_are_listed_with_host_pid_and_jobs(kb: Knowledge, live_server) -> None:  # type: ignore[no-untyped-def]
    import httpx

    from knowbase.interfaces.http import create_app

    kb.start_workers()
    try:
        report = readiness(kb)
        (worker,) = component(report, "workers")["details"]["workers"]
        assert set(worker) == {
            "id", "host", "pid", "started_at", "heartbeat_at", "heartbeat_age_s", "jobs_held"
        }  # fmt: skip
        assert worker["pid"] == os.getpid() and worker["jobs_held"] == 0
        assert worker["host"] in component(report, "workers")["reason"]
        with httpx.Client(base_url=live_server(create_app(kb)), timeout=20) as client:
            served = client.get("/status").json()
        (listed,) = component(served, "workers")["details"]["workers"]
        assert (listed["id"], listed["host"], listed["pid"]) == (
            worker["id"], worker["host"], worker["pid"]
        )  # fmt: skip
    finally:
        kb.stop_workers()
