"""Bearer-token auth: the app built with ``require_token`` (as ``kb serve`` builds it for a
non-loopback host), exercised over real HTTP on loopback only; plus the bind rule of kb serve."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import typer
import uvicorn

from knowbase.errors import InvalidInput
from knowbase.interfaces.cli.serve import check_bind, is_loopback
from knowbase.interfaces.http import create_app
from knowbase.service import Knowledge
from knowbase.settings import load_settings

pytestmark = pytest.mark.timeout(60)
TOKEN = "s3cret-token-\u00e9"  # non-ASCII on purpose: compared as bytes


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with Knowledge(load_settings(tmp_path)) as kb:
        app = create_app(kb, token=TOKEN, require_token=True)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.01)
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        server.should_exit = True
        thread.join(10)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "Bearer " + TOKEN[:-1]},
        {"Authorization": "Basic " + TOKEN},
        {"Authorization": TOKEN},
    ],
    ids=["none", "wrong", "prefix", "basic", "no-scheme"],
)
def test_missing_or_wrong_token_is_401_with_the_error_shape(url: str, headers: dict) -> None:
    headers = {k: v.encode() for k, v in headers.items()}  # type: ignore[misc]
    for method, path in (("GET", "/bases"), ("POST", "/bases"), ("GET", "/status")):
        r = httpx.request(method, url + path, headers=headers, json={"name": "x"})
        assert r.status_code == 401
        assert r.json()["code"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"
    # nothing was created by the refused POSTs
    good = {"Authorization": ("Bearer " + TOKEN).encode()}
    assert httpx.get(url + "/bases", headers=good).json() == []


def test_right_token_is_served(url: str) -> None:
    headers = {"Authorization": ("Bearer " + TOKEN).encode()}
    r = httpx.post(url + "/bases", headers=headers, json={"name": "docs"})
    assert r.status_code == 201, r.text
    assert [b["name"] for b in httpx.get(url + "/bases", headers=headers).json()] == ["docs"]
    # Every real route is closed without the token, whatever it would answer.
    assert httpx.get(url + "/bases/docs").status_code == 401


def test_openapi_declares_the_bearer_scheme(url: str) -> None:
    doc = httpx.get(url + "/openapi.json").json()
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "401" in doc["paths"]["/bases"]["get"]["responses"]


def test_require_token_without_one_refuses_to_build(tmp_path: Path) -> None:
    with Knowledge(load_settings(tmp_path)) as kb, pytest.raises(InvalidInput):
        create_app(kb, require_token=True)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.org", False),
    ],
)
def test_kb_serve_refuses_a_non_loopback_bind_without_a_token(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    check_bind(host, "token")  # a token makes any bind acceptable
    if loopback:
        check_bind(host, None)
    else:
        with pytest.raises(typer.BadParameter, match="KNOWBASE_API_TOKEN"):
            check_bind(host, None)
