"""End to end over streamable HTTP: ``kb mcp --http`` in a subprocess on a free loopback port.

Two client sessions against one server: the current protocol (elicitation rides
``InputRequiredResult``) and the legacy handshake (a mid-call ``elicitation/create`` request).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, types

from knowbase.catalog.models import Base
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(90)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def docs(kb: Knowledge) -> Base:
    base = kb.create_base("docs", file_processor_id=None)
    kb.add_note(base.id, "Owls hunt at night.\nThey are birds.", title="Owls")
    kb.create_base("hidden", file_processor_id=None)
    return base


@pytest.fixture
def http_url(home: Path, docs: Base) -> Iterator[str]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "knowbase.interfaces.cli",
        "mcp",
        "--home",
        str(home),
        "--http",
        "--port",
        str(port),
        "--base",
        "docs",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited: {proc.stderr.read() if proc.stderr else ''}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def data(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result
    return result.structured_content


def approver(answers: list[str], asked: list[str]) -> Any:
    async def callback(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        action = answers.pop(0)
        content = {"approve": True} if action == "accept" else None
        return types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]

    return callback


def test_http_tools_scope_and_approval(http_url: str, docs: Base) -> None:
    asked: list[str] = []

    async def story() -> None:
        async with Client(http_url, elicitation_callback=approver(["decline"], asked)) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert names == {
                "kb_list", "kb_tree", "kb_search", "kb_outline", "kb_read", "kb_grep", "kb_manage"
            }  # fmt: skip
            listed = data(await c.call_tool("kb_list", {}))
            assert [b["name"] for b in listed["items"]] == ["docs"]  # "hidden" is out of scope
            outline = data(await c.call_tool("kb_list", {"baseId": docs.id}))
            assert outline["nodes"][0]["conceptId"] == "Owls.md"
            hits = data(
                await c.call_tool("kb_search", {"query": "owls night", "baseIds": ["docs"]})
            )
            assert hits["items"][0]["conceptId"] == "Owls.md"
            page = data(await c.call_tool("kb_read", {"baseId": "docs", "conceptId": "Owls.md"}))
            assert page["content"] == "Owls hunt at night.\nThey are birds."
            grep = data(
                await c.call_tool(
                    "kb_read", {"baseId": "docs", "conceptId": "Owls.md", "pattern": "^they"}
                )
            )
            assert grep["matches"][0]["line"] == 2

            for call in (
                ("kb_list", {"baseId": "hidden"}),
                ("kb_read", {"baseId": "hidden", "conceptId": "x.md"}),
                ("kb_search", {"query": "owls", "baseIds": ["hidden"]}),
                (
                    "kb_manage",
                    {"baseId": "hidden", "action": "add", "type": "note", "content": "x"},
                ),
            ):
                result = await c.call_tool(*call)
                assert result.is_error, call
                body = str(data(result))
                assert "is not available to this assistant" in body or "every requested" in body

            declined = await c.call_tool(
                "kb_manage", {"baseId": "docs", "action": "refresh", "conceptIds": ["Owls.md"]}
            )
            assert declined.is_error and data(declined)["code"] == "approval_declined"
        assert len(asked) == 1 and "refresh 1 document(s) in 'docs': Owls.md" in asked[0]

        # The legacy handshake: elicitation is a server-to-client request in the middle of the call.
        async with Client(
            http_url, mode="legacy", elicitation_callback=approver(["accept"], asked)
        ) as c:
            refreshed = await c.call_tool(
                "kb_manage", {"baseId": "docs", "action": "refresh", "conceptIds": ["Owls.md", "x"]}
            )
            assert not refreshed.is_error, refreshed
            assert data(refreshed) == {
                "action": "refresh",
                "refreshed": ["Owls.md"],
                "notFound": ["x"],
            }
        assert len(asked) == 2

    anyio.run(story)
