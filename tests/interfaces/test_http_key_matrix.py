"""Scoped keys (issue 44 item 3): every key × every HTTP route, MCP tool and ``/retrieval``.

The matrix is generated from the one table of scope rules (``knowbase.interfaces.access``):
each route of ``/openapi.json`` and each tool the MCP server lists must have a rule (a new one
without fails here), and each cell's expected outcome follows from the rule and the key:

- ``401``: no key, a wrong one, an expired or a revoked one (Dify's ``/retrieval``: its 403);
- ``404``: the route names a base the key does not see -- answered as a base that does not
  exist, word for word (MCP: "not available to this assistant");
- ``403``: the key sees the base but lacks the access (``key_not_allowed``);
- ``pass``: the check let the request through (the route then answers what it answers: a 2xx,
  a 404 for an item that does not exist, a 422 for the empty body the probe sends -- anything
  but a refusal or a 5xx).

One HTTP server and one MCP server per backend (SQLite, and PostgreSQL with
``KB_TEST_BACKENDS=postgres``) serve every cell. Probes are harmless: bodies are empty or name
an item that does not exist; the admin's path-base probes go to base ``c``, which is made again
when a probe deleted it.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn

from knowbase.catalog.models import OPEN, Principal
from knowbase.interfaces.access import ROUTES, TOOLS, Rule, rule_for
from knowbase.interfaces.http import create_app
from knowbase.interfaces.mcp.run import http_app
from knowbase.service import Knowledge
from knowbase.settings import Settings

BACKENDS = tuple(os.environ.get("KB_TEST_BACKENDS", "sqlite").split(","))  # as conftest.py

pytestmark = pytest.mark.timeout(300)

ADMIN_TOKEN = "admin-token-\u00e9"
DIFY_KEY = "dify-key"
KEYS = ("admin", "write-a", "read-a", "read-b", "expired", "revoked", "none")


def auth(token: str | None) -> dict[str, bytes]:
    """The header for ``token`` (UTF-8 bytes: the admin token is not ASCII on purpose)."""
    return {"Authorization": f"Bearer {token}".encode()} if token else {}


@dataclass
class World:
    kb: Knowledge
    url: str
    mcp_url: str
    tokens: dict[str, str | None]
    principals: dict[str, Principal | None]  # None: refused (401)
    job_a: str  # a job of base a
    app: Any


def _serve(app: Any) -> tuple[uvicorn.Server, threading.Thread, str]:
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, f"http://127.0.0.1:{port}"


def _settings(request: pytest.FixtureRequest, home: Path) -> Settings:
    if request.param == "postgres":
        from pg_server import TEMPLATE_DB

        pg = request.getfixturevalue("pg_server")
        if not pg.has_vector:
            pytest.skip("the postgres backend needs pgvector: run .ci/pgvector.sh")
        url = pg.url(pg.new_database(TEMPLATE_DB))
        return Settings(
            home=home, database_url=url, test_providers=True, external_api_keys=(DIFY_KEY,)
        )
    return Settings(home=home, test_providers=True, external_api_keys=(DIFY_KEY,))


@pytest.fixture(scope="module", params=BACKENDS)
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    home = tmp_path_factory.mktemp("keys-home")
    kb = Knowledge(_settings(request, home))
    try:
        for name, text in (("a", "Owls hunt at night."), ("b", "Bees make honey.")):
            base = kb.create_base(name, file_processor_id=None)
            kb.add_note(base.id, text, title="Note")
        kb.create_base("c", file_processor_id=None)
        job_a = kb.activity.list_jobs(base="a", limit=1)[0].id
        tokens: dict[str, str | None] = {"admin": ADMIN_TOKEN, "none": None}
        _, tokens["write-a"] = kb.create_key("write-a", write=True, bases=["a"])
        _, tokens["read-a"] = kb.create_key("read-a", write=False, bases=["a"])
        _, tokens["read-b"] = kb.create_key("read-b", write=False, bases=["b"])
        _, tokens["revoked"] = kb.create_key("revoked", write=True)
        kb.revoke_key("revoked")
        # a key cannot be made expired: this one expires 2 s after it is made, before the probes
        expires = int(time.time() * 1000) + 2000
        _, tokens["expired"] = kb.create_key("expired", write=True, expires_at_ms=expires)
        a, b = kb.get_base("a").id, kb.get_base("b").id
        principals: dict[str, Principal | None] = {
            "admin": Principal("admin", "admin"),
            "write-a": Principal("write-a", "write", frozenset({a})),
            "read-a": Principal("read-a", "read", frozenset({a})),
            "read-b": Principal("read-b", "read", frozenset({b})),
            "expired": None,
            "revoked": None,
            "none": None,
        }
        app = create_app(kb, token=ADMIN_TOKEN)
        mcp = http_app(kb, base_ids=None, allow_writes=True, admin_token=ADMIN_TOKEN)
        servers = [_serve(app), _serve(mcp)]
        time.sleep(max(0.0, (expires + 100) / 1000 - time.time()))  # "expired" has expired
        yield World(kb, servers[0][2], servers[1][2] + "/mcp", tokens, principals, job_a, app)
        for server, _, _ in servers:
            server.should_exit = True
        for _, thread, _ in servers:
            thread.join(10)
    finally:
        kb.close()


# --- the expectation, from the rule --------------------------------------------------------
def _sees_probe(world: World, key: str) -> bool:
    principal = world.principals[key]
    return principal is not None and principal.sees(world.kb.get_base("a").id)


def expect(world: World, rule: Rule, key: str) -> str:
    principal = world.principals[key]
    if rule.access == "public":
        return "pass"
    if principal is None:
        return "401"
    if rule.names not in ("none", "list") and not _sees_probe(world, key):
        return "404"
    return "pass" if principal.allows(rule.access) else "403"


# --- HTTP --------------------------------------------------------------------------------
#: A probe body for each route whose rule says its base comes in the body or the query: it
#: names base ``a``. A new such route fails :func:`test_every_route_has_a_rule_and_a_probe`
#: until it has one here.
BODY_PROBES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/search"): {"json": {"query": "owls", "bases": ["a"]}},
    ("GET", "/jobs"): {"params": {"base": "a"}},
    ("POST", "/retrieval"): {"json": {"knowledge_id": "a", "query": "owls"}},
    ("POST", "/dify/retrieval"): {"json": {"knowledge_id": "a", "query": "owls"}},
}


def openapi_routes(world: World) -> list[tuple[str, str]]:
    # the first request builds the schema (0.3 s here when quiet; past httpx's 5 s default on
    # a 2-core machine at load 8): the test is about the routes, not that latency
    doc = httpx.get(world.url + "/openapi.json", timeout=60).json()
    return sorted((m.upper(), p) for p, ops in doc["paths"].items() for m in ops)


def app_routes(app: Any) -> set[tuple[str, str]]:
    """Every (method, path) the app serves, the console's pages and hidden routes included."""
    found: set[tuple[str, str]] = set()

    def walk(routes: list[Any], prefix: str) -> None:
        for r in routes:
            if hasattr(r, "methods") and hasattr(r, "path"):
                found.update((m, prefix + r.path) for m in r.methods if m != "HEAD")
            elif hasattr(r, "original_router"):
                walk(r.original_router.routes, prefix + r.include_context.prefix)

    walk(app.routes, "")
    return found


def _fill(world: World, path: str, key: str) -> str:
    base = "c" if key == "admin" else "a"  # the admin's probes may delete: never base a
    return (
        path.replace("{base}", base)
        .replace("{item_id}", "no-such-item")
        .replace("{item}", "no-such-item")
        .replace("{job_id}", world.job_a)
    )


def probe(world: World, client: httpx.Client, method: str, path: str, key: str) -> str:
    """The outcome class of one cell (module docstring)."""
    if key == "admin" and "{base}" in path:
        try:
            world.kb.get_base("c")
        except Exception:  # an earlier admin probe deleted it
            world.kb.create_base("c", file_processor_id=None)
    token = world.tokens[key]
    headers = auth(token)
    extra = BODY_PROBES.get((method, path), {})
    if not extra and method in ("POST", "PATCH", "PUT"):
        extra = {"json": {}}
    with client.stream(method, world.url + _fill(world, path, key), headers=headers, **extra) as r:
        status = r.status_code
        # the event stream never ends: read a body only when it is JSON
        body = json.loads(r.read()) if "json" in r.headers.get("content-type", "") else {}
    if not isinstance(body, dict):  # a list: served
        body = {}
    is_dify = path.endswith("/retrieval")
    if status == 401 or (is_dify and status == 403 and body.get("error_code") in (1001, 1002)):
        return "401"
    if status == 403:
        assert body.get("code") == "key_not_allowed", (method, path, key, body)
        return "403"
    # hidden: the very answer a base (or job) that does not exist gets
    message = str(body.get("message", ""))
    if status == 404 and (
        message.startswith(("no knowledge base named or with id", "no job "))
        or (is_dify and body.get("error_code") == 2001)
    ):
        return "404"
    assert status < 500, (method, path, key, status, body)
    return "pass"


def test_every_route_has_a_rule_and_a_probe(world: World) -> None:
    served = app_routes(world.app)
    missing = sorted(r for r in served if rule_for(*r) is None)
    assert missing == [], f"routes without a scope rule in interfaces/access.py: {missing}"
    stale = sorted(set(ROUTES) - {(m, re.sub(r"\{(\w+):\w+\}", r"{\1}", p)) for m, p in served})
    assert stale == [], f"scope rules for routes that do not exist: {stale}"
    for method, path in openapi_routes(world):
        rule = rule_for(method, path)
        assert rule is not None, (method, path)
        if rule.names in ("body", "query", "own"):
            assert (method, path) in BODY_PROBES, f"{method} {path} needs a probe naming base a"


#: The only routes that read although they are not GETs (a query too long for a URL).
READING_POSTS = {
    ("POST", "/bases/{base}/search"),
    ("POST", "/search"),
    *(("POST", p) for p in ("/retrieval", "/dify/retrieval", "//retrieval", "/dify//retrieval")),
}


def test_the_table_says_what_the_issue_says() -> None:
    """The matrix checks the server against the table; this checks the table: reads are GETs
    (and the searches), everything else needs write or admin, creating and deleting bases is
    the admin's."""
    for (method, path), rule in ROUTES.items():
        if method == "GET":
            assert rule.access in ("read", "public"), (method, path)
        elif (method, path) in READING_POSTS:
            assert rule.access == "read", (method, path)
        else:
            assert rule.access in ("write", "admin"), (method, path)
    assert ROUTES[("POST", "/bases")].access == "admin"
    assert ROUTES[("DELETE", "/bases/{base}")].access == "admin"
    assert TOOLS["kb_manage"].access == "write"
    assert {r.access for n, r in TOOLS.items() if n != "kb_manage"} == {"read"}


def test_http_matrix(world: World) -> None:
    """Every route of /openapi.json × every key: the outcome its rule says."""
    routes = openapi_routes(world)
    assert len(routes) >= 30 and ("POST", "/retrieval") in routes
    table: dict[tuple[str, str], dict[str, str]] = {}
    wrong = []
    with httpx.Client(timeout=30) as client:
        for method, path in routes:
            rule = rule_for(method, path)
            assert rule is not None, f"{method} {path} has no scope rule"
            for key in KEYS:
                got = probe(world, client, method, path, key)
                want = expect(world, rule, key)
                table.setdefault((method, path), {})[key] = got
                if got != want:
                    wrong.append(f"{method} {path} as {key}: {got}, expected {want}")
    assert wrong == [], "\n".join(wrong)
    # the matrix is not trivially one outcome: each kind of answer occurs
    seen = {v for row in table.values() for v in row.values()}
    assert seen == {"pass", "401", "403", "404"}


# --- MCP over HTTP -------------------------------------------------------------------------
TOOL_PROBES: dict[str, dict[str, Any]] = {
    "kb_list": {"baseId": "a"},
    "kb_tree": {"baseId": "a"},
    "kb_grep": {"baseId": "a", "conceptId": "Note.md", "pattern": "owl"},
    "kb_search": {"query": "owls", "baseIds": ["a"]},
    "kb_read": {"baseId": "a", "conceptId": "Note.md"},
    "kb_outline": {"baseId": "a", "conceptId": "Note.md"},
    "kb_manage": {"baseId": "a", "action": "add", "type": "note", "content": "Owls are birds."},
}


def _mcp_client(world: World, key: str) -> Any:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    token = world.tokens[key]
    headers = auth(token)
    http = create_mcp_http_client(headers=headers)
    return Client(streamable_http_client(world.mcp_url, http_client=http))


def _tool_outcome(result: Any) -> str:
    if not result.is_error:
        return "pass"
    body = result.structured_content or {}
    text = json.dumps(body) + " ".join(getattr(c, "text", "") for c in result.content)
    if body.get("code") == "key_not_allowed":
        return "403"
    if "is not available to this assistant" in text or "every requested" in text:
        return "404"
    return f"error: {text[:200]}"


def test_mcp_matrix(world: World) -> None:
    """Every MCP tool × every key over streamable HTTP; a key without a usable token gets 401
    before any session exists."""
    outcomes: dict[tuple[str, str], str] = {}
    sections: dict[str, str] = {}

    async def run() -> None:
        for key in KEYS:
            if world.principals[key] is None:
                r = httpx.post(
                    world.mcp_url,
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                    headers=auth(world.tokens[key]) if world.tokens[key] else {},
                )
                assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
                for tool in TOOLS:
                    outcomes[(tool, key)] = "401"
                continue
            async with _mcp_client(world, key) as c:
                listed = {t.name for t in (await c.list_tools()).tools}
                assert listed == set(TOOLS), "every MCP tool needs a rule in TOOLS (and back)"
                assert set(TOOL_PROBES) == listed, "every MCP tool needs a probe here"
                for tool, args in TOOL_PROBES.items():
                    outcomes[(tool, key)] = _tool_outcome(await c.call_tool(tool, args))
                # a section read answers within the key's scope like any other read
                section = {**TOOL_PROBES["kb_read"], "section": "1"}
                sections[key] = _tool_outcome(await c.call_tool("kb_read", section))
                # without baseId, kb_list lists the key's bases only
                bases = (await c.call_tool("kb_list", {})).structured_content or {}
                names = {b["name"] for b in bases["items"]}
                assert names == ({"b"} if key == "read-b" else {"a"} if "-a" in key else names)
                if key == "admin":
                    assert {"a", "b", "c"} <= names

    anyio.run(run)
    wrong = [
        f"{tool} as {key}: {got}, expected {want}"
        for (tool, key), got in outcomes.items()
        if got != (want := expect(world, TOOLS[tool], key))
    ]
    assert wrong == [], "\n".join(wrong)
    assert sections == {k: outcomes[("kb_read", k)] for k in sections}
    # the adds kb_manage made record who asked, through which surface
    by_mcp = world.kb.activity.list_jobs(by_key="write-a", limit=100)
    assert "mcp" in {j.by_surface for j in by_mcp}


# --- what a scoped key sees, and what changes record ----------------------------------------
def _get(world: World, key: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.get(world.url + path, headers=auth(world.tokens[key]), **kw)


def test_a_scoped_key_sees_no_other_base(world: World) -> None:
    assert [b["name"] for b in _get(world, "read-a", "/bases").json()] == ["a"]
    assert {b["name"] for b in _get(world, "admin", "/bases").json()} >= {"a", "b", "c"}
    a, b = world.kb.get_base("a").id, world.kb.get_base("b").id
    assert {j["queue"] for j in _get(world, "read-a", "/jobs?limit=500").json()} == {f"base.{a}"}
    components = _get(world, "read-b", "/status").json()["components"]
    assert {c["base_id"] for c in components if c.get("base_id")} == {b}
    # multi-base search: a base outside the key is unknown, even next to a visible one
    r = httpx.post(
        world.url + "/search",
        json={"query": "owls", "bases": ["a", "b"]},
        headers=auth(world.tokens["read-a"]),
    )
    assert r.status_code == 404


def test_names_do_not_leak(world: World) -> None:
    """A scoped key's answer for another base is the answer for a base that does not exist."""
    hidden = _get(world, "read-a", "/bases/b")
    missing = _get(world, "admin", "/bases/no-such-base")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json() == json.loads(missing.text.replace("no-such-base", "b"))
    # by id too, and for a write the key could not make anyway (404 before 403)
    b_id = world.kb.get_base("b").id
    assert _get(world, "read-a", f"/bases/{b_id}").status_code == 404
    r = httpx.delete(
        world.url + "/bases/b/items/x",
        headers=auth(world.tokens["read-a"]),
    )
    assert r.status_code == 404


def test_changes_record_the_key_and_surface(world: World) -> None:
    headers = auth(world.tokens["write-a"])
    r = httpx.post(
        world.url + "/bases/a/items",
        json={"inputs": [{"type": "note", "content": "Owls fly silently.", "title": "Silent"}]},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    console = {**headers, "X-Knowbase-Surface": "console"}
    r = httpx.post(world.url + "/bases/a/jobs/cancel", headers=console)
    assert r.status_code == 200, r.text
    r = httpx.post(
        world.url + "/bases/a/items",
        json={"inputs": [{"type": "note", "content": "Owls have soft feathers.", "title": "Soft"}]},
        headers=console,
    )
    assert r.status_code == 201, r.text
    jobs = _get(world, "admin", "/jobs", params={"by": "write-a", "limit": 100}).json()
    assert jobs and {j["by_key"] for j in jobs} == {"write-a"}
    assert {"http", "console"} <= {j["by_surface"] for j in jobs}
    # read through the facade as kb jobs --by does
    mine = world.kb.activity.list_jobs(by_key="write-a", limit=100)
    assert {j.id for j in mine} == {j["id"] for j in jobs}
    assert world.kb.activity.list_jobs(by_key="read-a", limit=10) == []


def test_the_admin_token_stays_the_admin(world: World) -> None:
    r = httpx.post(
        world.url + "/bases",
        json={"name": "made-by-admin"},
        headers=auth(ADMIN_TOKEN),
    )
    assert r.status_code == 201, r.text
    r = httpx.post(
        world.url + "/bases",
        json={"name": "made-by-key"},
        headers=auth(world.tokens["write-a"]),
    )
    assert r.status_code == 403 and r.json()["code"] == "key_not_allowed"


def test_an_open_server_closes_once_a_key_exists(tmp_path: Path) -> None:
    """No token and no key: open, as before keys. A live key: every request needs one."""
    with Knowledge(Settings(home=tmp_path / "home", test_providers=True)) as kb:
        server, thread, url = _serve(create_app(kb))
        try:
            assert httpx.get(url + "/bases").status_code == 200
            _, token = kb.create_key("ci", write=False)
            assert httpx.get(url + "/bases").status_code == 401
            ok = httpx.get(url + "/bases", headers=auth(token))
            assert ok.status_code == 200
            kb.revoke_key("ci")
            assert httpx.get(url + "/bases").status_code == 200  # open again
            assert OPEN.allows("admin")
        finally:
            server.should_exit = True
            thread.join(10)
