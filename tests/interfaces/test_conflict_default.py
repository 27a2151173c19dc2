"""One conflict default on every surface (issue 38 item 5): re-adding a source the base holds
updates that item on the facade, HTTP (JSON body), the CLI and MCP alike, and the upload forms
(HTTP and console) declare the same default in the OpenAPI document.

Before, the facade and HTTP defaulted to ``rename`` (a second copy) while the CLI and MCP
updated: the same request meant two things depending on where it came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from knowbase import DEFAULT_STRATEGY, STRATEGIES, AddInput
from knowbase.catalog.models import Base
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)

#: A page on a closed loopback port: a base that allows local URLs takes it, and without a
#: worker its item stays queued (a re-add then resumes it rather than adding a copy).
PAGE = "http://127.0.0.1:9/page"


def _roots(kb: Knowledge, base: Base, type: str) -> list[Any]:
    return [i for i in kb.list_items(base.id) if i.type == type and i.group_id is None]


def test_the_default_is_update_and_one_of_the_strategies() -> None:
    import inspect

    assert DEFAULT_STRATEGY == "update" and DEFAULT_STRATEGY in STRATEGIES
    default = inspect.signature(Knowledge.add).parameters["strategy"].default
    assert default == DEFAULT_STRATEGY


def test_facade_re_add_of_a_file_updates_it(kb: Knowledge, bm25_base: Base, tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    doc.write_text("# A\n\nalpha text\n", encoding="utf-8")
    first = kb.add(bm25_base.id, [AddInput.file(doc)], wait=True)
    again = kb.add(bm25_base.id, [AddInput.file(doc)], wait=True)
    assert again.items == [] and [i.id for i in again.updated] == [first.items[0].id]
    assert len(_roots(kb, bm25_base, "file")) == 1


def test_http_json_re_add_of_a_page_updates_it(kb: Knowledge) -> None:
    from fastapi.testclient import TestClient

    from knowbase.interfaces.http import create_app

    base = kb.create_base("pages", file_processor_id=None, allow_local_urls=True)
    client = TestClient(create_app(kb), base_url="http://127.0.0.1")
    body = {"inputs": [{"type": "url", "url": PAGE}]}
    first = client.post("/bases/pages/items", json=body)
    assert first.status_code == 201, first.text
    again = client.post("/bases/pages/items", json=body)
    assert again.status_code == 201, again.text
    assert again.json()["items"] == []
    assert [i["id"] for i in again.json()["updated"]] == [first.json()["items"][0]["id"]]
    assert len(_roots(kb, base, "url")) == 1


def test_openapi_declares_the_default_for_the_body_and_both_upload_forms(kb: Knowledge) -> None:
    """The JSON body, ``/uploads`` and the console's ``/uploads/folders`` forms."""
    from fastapi.testclient import TestClient

    from knowbase.interfaces.http import create_app

    doc = TestClient(create_app(kb), base_url="http://127.0.0.1").get("/openapi.json").json()
    schemas = doc["components"]["schemas"]

    def conflict_of(path: str) -> dict[str, Any]:
        content = doc["paths"][path]["post"]["requestBody"]["content"]
        schema = next(iter(content.values()))["schema"]
        if "$ref" in schema:
            schema = schemas[schema["$ref"].rsplit("/", 1)[-1]]
        return schema["properties"]["conflict"]

    for path in ("/bases/{base}/items", "/bases/{base}/uploads", "/bases/{base}/uploads/folders"):
        field = conflict_of(path)
        assert field["default"] == DEFAULT_STRATEGY, path
        assert "update" in field.get("description", ""), path


def test_cli_re_add_of_a_file_updates_it(
    kb: Knowledge, bm25_base: Base, home: Path, tmp_path: Path
) -> None:
    from knowbase.interfaces.cli import app

    doc = tmp_path / "a.md"
    doc.write_text("# A\n\nalpha text\n", encoding="utf-8")
    kb.close()
    runner = CliRunner()
    args = ["add", "bm25", str(doc), "--home", str(home), "--json"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    out = json.loads(again.stdout)
    assert out["items"] == [] and len(out["updated"]) == 1
    with Knowledge(kb.settings) as reopened:
        assert len(_roots(reopened, bm25_base, "file")) == 1


def test_mcp_re_add_of_a_page_updates_it(kb: Knowledge) -> None:
    import anyio
    from mcp import Client

    from knowbase.interfaces.mcp import build_server

    base = kb.create_base("pages", file_processor_id=None, allow_local_urls=True)
    server = build_server(kb, base_ids=None, allow_writes=True)
    args = {"baseId": "pages", "action": "add", "type": "url", "url": PAGE}

    async def add() -> dict[str, Any]:
        async with Client(server) as c:
            result = await c.call_tool("kb_manage", args)
        assert not result.is_error and result.structured_content is not None, result
        return result.structured_content

    first, again = anyio.run(add), anyio.run(add)
    assert first["added"] == [PAGE] and again["added"] == [] and again["updated"] == [PAGE]
    assert len(_roots(kb, base, "url")) == 1
