"""Host / Origin checks (DNS rebinding, cross-site writes): the pure policy, then ``kb serve``'s
app and ``kb mcp --http`` over real HTTP on loopback. ``kb serve --processes`` is covered in
test_http_processes.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from knowbase.interfaces.http import create_app
from knowbase.interfaces.http.guard import HostPolicy, normalise_host
from knowbase.service import Knowledge
from knowbase.settings import load_settings

pytestmark = pytest.mark.timeout(90)
NOTE = b"# Planted\n\nwritten by a foreign page\n"


def assert_error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code and body["message"]
    return body


# --- the policy (pure) -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("localhost:8765", "localhost"),
        ("LOCALHOST.", "localhost"),
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]:8765", "[::1]"),
        ("[0:0::1]", "[::1]"),
        ("::1", "[::1]"),
        ("kb.example:443", "kb.example"),
        ("", None),
        ("evil.example:x", None),
        ("a b", None),
        ("user@host", None),
        ("[::1", None),
        ("[::1]x", None),
        ("[nothex]:80", None),
    ],
)
def test_normalise_host(raw: str, expected: str | None) -> None:
    assert normalise_host(raw) == expected


def test_loopback_bind_answers_to_the_loopback_names_only() -> None:
    policy = HostPolicy.for_bind("127.0.0.1")
    for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "localhost"):
        assert policy.host_allowed(host), host
    for host in ("evil.example:8765", "127.0.0.2:8765", "", None, "localhost.evil.example"):
        assert not policy.host_allowed(host), host


def test_own_names_with_another_port_are_refused() -> None:
    """Issue 37: ``Host: localhost:1`` reached a server on 8765. A port in Host is the port
    the client meant; a configured name (a proxy in front) may carry any."""
    policy = HostPolicy.for_bind("127.0.0.1", ["kb.example"])
    for host in ("localhost:8765", "127.0.0.1:8765", "[::1]:8765", "localhost", "kb.example:1"):
        assert policy.host_allowed(host, 8765), host
    for host in ("localhost:1", "127.0.0.1:80", "[::1]:8766", "LocalHost.:9"):
        assert not policy.host_allowed(host, 8765), host
        assert policy.host_allowed(host), host  # no port known: names only, as before
    wild = HostPolicy.for_bind("0.0.0.0", ["kb.example"])
    assert wild.host_allowed("localhost:8765", 8765) and not wild.host_allowed("localhost:1", 8765)


def test_bound_address_and_configured_names() -> None:
    policy = HostPolicy.for_bind("192.168.1.5", ["KB.example", " ", "::2"])
    assert policy.names == {"192.168.1.5", "kb.example", "[::2]"}
    assert policy.host_allowed("kb.example:8765") and policy.host_allowed("[::2]:1")
    assert not policy.host_allowed("localhost:8765")  # not bound to loopback
    assert HostPolicy.for_bind("::1").names == {"localhost", "127.0.0.1", "[::1]"}


def test_wildcard_bind_checks_host_only_when_names_are_configured() -> None:
    assert HostPolicy.for_bind("0.0.0.0").host_allowed("192.168.1.5:8765")
    named = HostPolicy.for_bind("::", ["kb.example"])
    assert named.host_allowed("kb.example") and named.host_allowed("localhost:1")
    assert not named.host_allowed("192.168.1.5:8765")
    assert HostPolicy.for_bind("127.0.0.1", ["*"]).host_allowed("anything.example")


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, True),  # curl, SDKs, the CLI
        ("http://127.0.0.1:8765", True),  # this server
        ("HTTP://127.0.0.1:8765/", True),
        ("http://localhost:6274", True),  # a configured origin
        # Issue 26: another program on this machine is another origin.
        ("http://127.0.0.1:9999", False),  # the same host, another port
        ("http://localhost:3000", False),  # a loopback name, another port
        ("http://127.0.0.1", False),  # port 80 is not 8765
        ("https://127.0.0.1:8765", False),  # another scheme
        ("http://localhost:8765", False),  # the request named 127.0.0.1:8765
        ("http://kb.example", False),  # an allowed Host name is not an allowed origin
        ("http://localhost:6275", False),
        ("http://evil.example", False),
        ("http://127.0.0.1.evil.example:8765", False),
        ("null", False),  # sandboxed frames, file:// pages
        ("file://", False),
        ("ftp://localhost", False),
        ("http://localhost@evil.example", False),
        ("", False),
        ("http://[::1", False),
    ],
)
def test_origin(origin: str | None, allowed: bool) -> None:
    policy = HostPolicy.for_bind("127.0.0.1", ["kb.example"], ["http://localhost:6274"])
    assert policy.origin_allowed(origin, "127.0.0.1:8765") is allowed


def test_own_origin_follows_the_request_scheme_host_and_port() -> None:
    policy = HostPolicy.for_bind("127.0.0.1", ["kb.example"])
    # Behind a TLS proxy that passes Host: the page and the request share scheme and host.
    assert policy.origin_allowed("https://kb.example", "kb.example", "https")
    assert not policy.origin_allowed("http://kb.example", "kb.example", "https")
    assert policy.origin_allowed("https://kb.example:443", "kb.example", "https")
    assert policy.origin_allowed("http://[::1]:8765", "[::1]:8765")
    assert not policy.origin_allowed("http://[::1]:8766", "[::1]:8765")
    assert not policy.origin_allowed("http://127.0.0.1:8765", None)
    # "*" turns the check off; an unparsable entry is ignored, not a wildcard.
    assert HostPolicy.for_bind("127.0.0.1", (), ["*"]).origin_allowed("http://x:1", "y:2")
    assert not HostPolicy.for_bind("127.0.0.1", (), ["nonsense"]).origin_allowed(
        "http://127.0.0.1:9999", "127.0.0.1:8765"
    )


def test_same_origin_is_allowed_on_a_wildcard_bind() -> None:
    policy = HostPolicy.for_bind("0.0.0.0")
    assert policy.origin_allowed("http://192.168.1.5:8765", "192.168.1.5:8765")
    assert not policy.origin_allowed("http://evil.example", "192.168.1.5:8765")


def test_origin_is_checked_only_on_state_changing_methods() -> None:
    policy = HostPolicy.for_bind("127.0.0.1")
    foreign = {"host": "127.0.0.1:8765", "origin": "http://evil.example"}
    assert policy.refusal("GET", foreign) is None
    for method in ("POST", "put", "PATCH", "DELETE"):
        status, code, message = policy.refusal(method, foreign)
        assert (status, code) == (403, "origin_not_allowed")
        assert message.startswith("requests from origin 'http://evil.example' may not change")
        assert "KNOWBASE_ALLOWED_ORIGINS" in message
    assert policy.refusal("GET", foreign, origin_methods=None)[:2] == (403, "origin_not_allowed")
    assert policy.refusal("GET", {"host": "evil.example"})[:2] == (421, "host_not_allowed")


# --- kb serve's app over HTTP ------------------------------------------------------------------
@pytest.fixture
def kb(tmp_path: Path) -> Iterator[Knowledge]:
    with Knowledge(load_settings(tmp_path / "home")) as kb:
        yield kb


@pytest.fixture
def url(kb: Knowledge, live_server) -> str:  # type: ignore[no-untyped-def]
    kb.create_base("docs", file_processor_id=None)
    return live_server(
        create_app(kb, allowed_hosts=["kb.example"], allowed_origins=["https://kb.example"])
    )


def upload(url: str, **headers: str) -> httpx.Response:
    files = {"files": ("planted.md", NOTE, "text/markdown")}
    return httpx.post(url + "/bases/docs/uploads", files=files, headers=headers, timeout=20)


def test_foreign_host_is_refused_421(url: str) -> None:
    assert httpx.get(url + "/bases").status_code == 200
    port = url.rsplit(":", 1)[1]
    assert httpx.get(url + "/bases", headers={"Host": f"localhost:{port}"}).status_code == 200
    assert httpx.get(url + "/bases", headers={"Host": "kb.example"}).status_code == 200
    assert httpx.get(url + "/bases", headers={"Host": "kb.example:1"}).status_code == 200
    other = int(port) + 1 if int(port) < 65535 else int(port) - 1
    for host in (
        f"evil.example:{port}",
        "127.0.0.1.nip.io",
        "kb.example.evil",
        # issue 37: one of its own names, but another server's port
        "localhost:1",
        f"127.0.0.1:{other}",
        f"[::1]:{other}",
    ):
        r = httpx.get(url + "/bases", headers={"Host": host})
        body = assert_error(r, 421, "host_not_allowed")
        assert body["details"]["host"] == host
    # Refused before routing: even an unknown path or the docs answer 421.
    assert httpx.get(url + "/openapi.json", headers={"Host": "evil.example"}).status_code == 421


def test_foreign_origin_upload_is_refused_and_writes_nothing(url: str, kb: Knowledge) -> None:
    port = int(url.rsplit(":", 1)[1])
    foreign = (
        "http://evil.example",
        "null",
        f"http://evil.example:{port}",
        # issue 26: a page another program serves on this machine, on another port
        f"http://127.0.0.1:{port + 1 if port < 65535 else port - 1}",
        "http://127.0.0.1:9999",
        "http://localhost:3000",
        f"https://127.0.0.1:{port}",
    )
    for origin in foreign:
        assert_error(upload(url, Origin=origin), 403, "origin_not_allowed")
        r = httpx.post(url + "/bases", json={"name": "x"}, headers={"Origin": origin})
        assert_error(r, 403, "origin_not_allowed")
        r = httpx.delete(url + "/bases/docs", headers={"Origin": origin})
        assert_error(r, 403, "origin_not_allowed")
    base = kb.get_base("docs")
    assert kb.list_items("docs") == [] and [b.name for b in kb.list_bases()] == ["docs"]
    assert list(kb.rt.storage(base.id).raw.iterdir()) == []
    # A read from a foreign page is served (the browser keeps the answer from the page).
    assert httpx.get(url + "/bases", headers={"Origin": "http://evil.example"}).status_code == 200


def test_same_origin_and_no_origin_are_accepted(url: str, kb: Knowledge) -> None:
    assert upload(url, Origin=url).status_code == 201  # the console served by this server
    assert upload(url).status_code == 201  # curl, SDKs
    assert upload(url, Origin="https://kb.example").status_code == 201  # a configured origin
    names = sorted(i.data["relative_path"] for i in kb.list_items("docs"))
    assert names == ["planted.md", "planted_1.md", "planted_2.md"]


# --- the real commands -------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def running(cmd: list[str], port: int, **env: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KNOWBASE_API_TOKEN": "", **env},
    )
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_kb_serve_reads_allowed_hosts_from_the_environment(tmp_path: Path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "knowbase.interfaces.cli", "serve", "--home", str(tmp_path)]
    proc = running([*cmd, "--port", str(port), "--no-workers"], port,
                   KNOWBASE_ALLOWED_HOSTS="kb.example, other.example",
                   KNOWBASE_ALLOWED_ORIGINS="https://kb.example")  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(url + "/bases", headers={"Host": "other.example"}).status_code == 200
        assert_error(httpx.get(url + "/bases", headers={"Host": "evil.example"}), 421,
                     "host_not_allowed")  # fmt: skip
        r = httpx.post(
            url + "/bases", json={"name": "x"}, headers={"Origin": "http://evil.example"}
        )
        assert_error(r, 403, "origin_not_allowed")
        r = httpx.post(
            url + "/bases", json={"name": "y"}, headers={"Origin": "http://127.0.0.1:9999"}
        )
        assert_error(r, 403, "origin_not_allowed")  # issue 26's reproduction
        r = httpx.post(url + "/bases", json={"name": "x"}, headers={"Origin": "https://kb.example"})
        assert r.status_code == 201, r.text
        r = httpx.post(url + "/bases", json={"name": "z"}, headers={"Origin": url})
        assert r.status_code == 201, r.text
    finally:
        stop(proc)


def test_kb_mcp_http_uses_the_same_guard(tmp_path: Path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "knowbase.interfaces.cli", "mcp", "--home", str(tmp_path)]
    cmd.append("--http")
    proc = running([*cmd, "--port", str(port), "--no-workers"], port,
                   KNOWBASE_ALLOWED_ORIGINS="http://localhost:6274")  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        accept = {"Accept": "application/json, text/event-stream"}

        def post(**headers: str) -> httpx.Response:
            return httpx.post(url, json=init, headers={**accept, **headers}, timeout=20)

        assert_error(post(Host="evil.example"), 421, "host_not_allowed")
        assert_error(post(Origin="http://evil.example"), 403, "origin_not_allowed")
        # Origin on every MCP request, as the SDK's own check did: a GET opens a stream too.
        r = httpx.get(url, headers={**accept, "Origin": "http://evil.example"}, timeout=20)
        assert_error(r, 403, "origin_not_allowed")
        # Another port of this machine is another origin (issue 26), unless configured.
        assert_error(post(Origin="http://127.0.0.1:9999"), 403, "origin_not_allowed")
        assert_error(post(Origin="http://localhost:6275"), 403, "origin_not_allowed")
        assert post(Origin=f"http://127.0.0.1:{port}").status_code == 200  # its own origin
        assert post(Origin="http://localhost:6274").status_code == 200  # MCP Inspector
        assert post().status_code == 200
    finally:
        stop(proc)
