"""Search filters on every surface: HTTP (JSON fields, GET parameters, the multi-base route),
the ``kb_search`` MCP tool, and ``kb search --under/--type/--since`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, types

from knowbase.catalog.models import Base
from knowbase.interfaces.http import create_app
from knowbase.interfaces.mcp import build_server
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(120)


def make_library(root: Path) -> Path:
    files = {
        "papers/alpaca.md": "Alpaca wool is soft and warm.",
        "papers/guide.txt": "A guide to alpaca wool for spinners.",
        "papers2/other.md": "Alpaca wool from another folder.",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def filled(kb: Knowledge, tmp_path: Path) -> Base:
    lib = make_library(tmp_path / "lib")
    base = kb.create_base("wool", file_processor_id=None)
    kb.add(base.id, [AddInput.directory(lib / "papers"), AddInput.directory(lib / "papers2")],
           wait=True)  # fmt: skip
    kb.add(base.id, [AddInput.note("Alpaca wool notes.")], wait=True)
    return base


@pytest.fixture
def client(kb: Knowledge, filled: Base, live_server) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=live_server(create_app(kb)), timeout=20) as c:
        yield c


def concept_ids(body: dict[str, Any]) -> list[str]:
    return sorted(r["concept_id"] for r in body["results"])


def test_http_filters(client: httpx.Client, filled: Base) -> None:
    url = f"/bases/{filled.name}/search"
    under = client.post(url, json={"query": "alpaca wool", "under": "papers", "top_k": 10})
    assert under.status_code == 200, under.text
    assert concept_ids(under.json()) == ["papers/alpaca.md", "papers/guide.txt"]
    assert under.json()["explain"]["filters"] == {"under": "papers", "allowed_materials": 2}
    typed = client.post(url, json={"query": "alpaca wool", "types": ["txt", "note"]}).json()
    assert sorted(r["item_type"] for r in typed["results"]) == ["file", "note"]
    got = client.get(url, params={"q": "alpaca wool", "under": "papers", "type": ["md"]})
    assert concept_ids(got.json()) == ["papers/alpaca.md"]
    late = client.post(url, json={"query": "alpaca wool", "since": "2999-01-01"})
    assert late.status_code == 200 and late.json()["results"] == []
    many = client.post(
        "/search", json={"query": "alpaca wool", "bases": [filled.name], "under": "papers2"}
    )
    assert concept_ids(many.json()) == ["papers2/other.md"]
    for bad in ({"types": ["pfd"]}, {"since": "soon"}, {"under": "../x"}):
        for route, extra in ((url, {}), ("/search", {"bases": [filled.name]})):
            r = client.post(route, json={"query": "alpaca", **bad, **extra})
            assert r.status_code == 422 and r.json()["code"] == "invalid_filter", r.text
    r = client.get(url, params={"q": "alpaca", "type": "pfd"})
    assert r.status_code == 422 and r.json()["code"] == "invalid_filter"
    r = client.post(url, json={"query": "alpaca", "types": "md"})  # a list, not a string
    assert r.status_code == 422


def call(server: Any, name: str, args: dict[str, Any]) -> types.CallToolResult:
    async def go() -> types.CallToolResult:
        async with Client(server) as c:
            return await c.call_tool(name, args)

    return anyio.run(go)


def test_mcp_kb_search_filters(kb: Knowledge, filled: Base) -> None:
    server = build_server(kb, base_ids=None, allow_writes=False)
    args = {"query": "alpaca wool", "baseIds": [filled.id]}
    found = call(server, "kb_search", {**args, "under": "papers", "types": ["md"]})
    assert found.structured_content is not None, found
    assert [i["conceptId"] for i in found.structured_content["items"]] == ["papers/alpaca.md"]
    since = call(server, "kb_search", {**args, "since": "2999-01-01"})
    assert since.structured_content is not None and since.structured_content["items"] == []
    block = since.content[0]
    assert isinstance(block, types.TextContent) and "filters" in block.text
    bad = call(server, "kb_search", {**args, "types": ["pfd"]})
    assert bad.is_error
    bad_text = bad.content[0]
    assert isinstance(bad_text, types.TextContent) and "pfd" in bad_text.text


def test_cli_search_filters(tmp_path: Path) -> None:
    env = {**os.environ, "KNOWBASE_HOME": str(tmp_path / "home")}

    def kb(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "knowbase.interfaces.cli", *args],
                              capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
        assert not check or proc.returncode == 0, proc.stderr
        return proc

    lib = make_library(tmp_path / "lib")
    kb("base", "create", "wool")
    kb("add", "wool", str(lib / "papers"), str(lib / "papers2"))
    out = json.loads(kb("search", "wool", "alpaca wool", "--under", "papers", "--json").stdout)
    assert concept_ids(out) == ["papers/alpaca.md", "papers/guide.txt"]
    out = json.loads(
        kb(
            "search",
            "wool",
            "alpaca wool",
            "--type",
            "txt",
            "--type",
            "md",
            "--under",
            "papers2",
            "--since",
            "2000-01-01",
            "--json",
        ).stdout  # fmt: skip
    )
    assert concept_ids(out) == ["papers2/other.md"]
    human = kb("search", "wool", "alpaca", "--type", "txt", "--explain").stdout
    assert "papers/guide.txt" in human and "allowed_materials" in human
    proc = kb("search", "wool", "alpaca", "--since", "tomorrow", check=False)
    assert proc.returncode == 1 and "invalid_filter" in proc.stderr
