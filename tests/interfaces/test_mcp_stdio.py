"""End to end over stdio: the SDK's client against ``kb mcp``.

One server process per session (each start costs ~2 s on 2 cores), so a session runs a story:
list the tools, call each, check results, errors and the approval path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, types

from knowbase.catalog.models import Base
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(90)

GUIDE = "# Guide\n\nInstall the tool with pip.\n\n## Usage\n\nRun the tool twice."


@pytest.fixture
def docs(kb: Knowledge, src: Path) -> Base:
    base = kb.create_base("docs", file_processor_id=None)
    (src / "guide.md").write_text(GUIDE, encoding="utf-8")
    kb.add(
        base.id, [AddInput.file(src / "guide.md"), AddInput.note("Paris is in France")], wait=True
    )
    return base


def server(home: Path, *extra: str) -> StdioServerParameters:
    args = ["-m", "knowbase.interfaces.cli", "mcp", "--home", str(home), *extra]
    # The SDK passes only a few variables on: keep PYTHONPATH, so the server runs this tree.
    env = {"HF_HUB_OFFLINE": "1"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return StdioServerParameters(command=sys.executable, args=args, env=env)


def data(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result
    return result.structured_content


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


class Approver:
    """An elicitation callback answering from a script and recording the questions."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def __call__(self, ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params.message)
        action = self.answers.pop(0)
        content = {"approve": True} if action == "accept" else None
        return types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]


async def poll(call: Callable[[], Any], ok: Callable[[Any], bool], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await call()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached: {value}")
        await anyio.sleep(0.2)


def test_stdio_tools_end_to_end(home: Path, docs: Base) -> None:
    approver = Approver("accept", "decline", "accept")

    async def story() -> None:
        async with Client(server(home), elicitation_callback=approver) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == {
                "kb_list", "kb_tree", "kb_search", "kb_outline", "kb_read", "kb_grep", "kb_manage",
            }
            for name in ("kb_list", "kb_tree", "kb_search", "kb_outline", "kb_read", "kb_grep"):
                assert tools[name].annotations.read_only_hint is True
            assert tools["kb_manage"].annotations.destructive_hint is True
            assert tools["kb_manage"].annotations.read_only_hint is False
            search_props = tools["kb_search"].input_schema["properties"]
            assert search_props["query"]["minLength"] == 2  # stated; the tool checks it
            assert search_props["query"]["maxLength"] == 200
            assert search_props["baseIds"]["minItems"] == 1
            read_props = tools["kb_read"].input_schema["properties"]
            assert {"baseId", "conceptId", "charStart", "charEnd", "pattern"} <= set(read_props)
            assert "approved" not in tools["kb_manage"].input_schema["properties"]

            listed = data(await c.call_tool("kb_list", {}))
            assert [b["name"] for b in listed["items"]] == ["docs"]
            assert listed["items"][0]["itemCount"] == 2
            assert "guide.md" in listed["items"][0]["sampleSources"]

            outline = data(await c.call_tool("kb_list", {"baseId": "docs"}))
            assert [n.get("conceptId") for n in outline["nodes"]] == [
                "guide.md",
                "Paris is in France.md",
            ]

            found = data(
                await c.call_tool("kb_search", {"query": "install pip", "baseIds": [docs.id]})
            )
            assert found["items"][0]["conceptId"] == "guide.md"
            assert found["items"][0]["id"].startswith("kb-")
            assert all(0 <= h["score"] <= 1 for h in found["items"])
            none = await c.call_tool("kb_search", {"query": "zebra quantum", "baseIds": ["docs"]})
            assert not none.is_error and "kb_list" in text(none)

            page = data(
                await c.call_tool(
                    "kb_read",
                    {"baseId": "docs", "conceptId": "guide.md", "charStart": 9, "charEnd": 16},
                )
            )
            assert page["content"] == "Install" and page["totalChars"] == len(GUIDE)
            assert page["truncated"] is False and page["locators"][0]["locator"]["heading"]
            grep = data(
                await c.call_tool(
                    "kb_read", {"baseId": "docs", "conceptId": "guide.md", "pattern": "TOOL"}
                )
            )
            assert grep["totalMatches"] == 2 and [m["line"] for m in grep["matches"]] == [3, 7]

            missing = await c.call_tool("kb_read", {"baseId": "docs", "conceptId": "../guide.md"})
            assert missing.is_error and "check the id" in data(missing)["guidance"].lower()
            bad = await c.call_tool(
                "kb_read", {"baseId": "docs", "conceptId": "guide.md", "pattern": "(unclosed"}
            )
            assert bad.is_error and data(bad)["code"] == "invalid_pattern"
            schema_bad = await c.call_tool(
                "kb_read", {"baseId": "docs", "conceptId": "guide.md", "maxMatches": 500}
            )
            assert schema_bad.is_error

            # Approval accepted: the note is added and indexed by the server's own workers.
            added = await c.call_tool(
                "kb_manage",
                {
                    "baseId": "docs",
                    "action": "add",
                    "type": "note",
                    "title": "Agent note",
                    "content": "Agents write notes.",
                },
            )
            assert not added.is_error, text(added)
            assert data(added)["added"] == ["Agent note"]
            assert "add note 'Agent note' to knowledge base 'docs'" in approver.asked[0]
            await poll(
                lambda: c.call_tool("kb_read", {"baseId": "docs", "conceptId": "Agent note.md"}),
                lambda r: not r.is_error,
            )

            # Declined: nothing changes.
            declined = await c.call_tool(
                "kb_manage", {"baseId": "docs", "action": "delete", "conceptIds": ["guide.md"]}
            )
            assert declined.is_error and data(declined)["code"] == "approval_declined"
            still = await c.call_tool("kb_read", {"baseId": "docs", "conceptId": "guide.md"})
            assert not still.is_error

            deleted = data(
                await c.call_tool(
                    "kb_manage",
                    {"baseId": "docs", "action": "delete", "conceptIds": ["guide.md", "nope.md"]},
                )
            )
            assert deleted == {"action": "delete", "deleted": ["guide.md"], "notFound": ["nope.md"]}
            gone = await c.call_tool("kb_read", {"baseId": "docs", "conceptId": "guide.md"})
            assert gone.is_error and data(gone)["code"] == "not_found"
        assert approver.answers == []

    anyio.run(story)


def test_stdio_without_elicitation_refuses_writes(home: Path, docs: Base) -> None:
    async def story() -> None:
        async with Client(server(home)) as c:
            refused = await c.call_tool(
                "kb_manage",
                {"baseId": "docs", "action": "add", "type": "note", "content": "sneaky"},
            )
            assert refused.is_error and data(refused)["code"] == "approval_required"
            assert "--allow-writes" in data(refused)["error"]
            outline = data(await c.call_tool("kb_list", {"baseId": "docs"}))
            assert outline["totalItems"] == 2  # nothing was added

    anyio.run(story)


def test_stdio_allow_writes_without_elicitation(home: Path, docs: Base, src: Path) -> None:
    (src / "extra.txt").write_text("an extra file about owls", encoding="utf-8")

    async def story() -> None:
        args = ("--allow-writes", "--allow-path", str(src), "--base", "docs")
        async with Client(server(home, *args)) as c:
            added = await c.call_tool(
                "kb_manage",
                {"baseId": "docs", "action": "add", "type": "file", "path": str(src / "extra.txt")},
            )
            assert not added.is_error, text(added)
            assert data(added)["added"] == ["extra.txt"]
            hit = await poll(
                lambda: c.call_tool("kb_search", {"query": "owls", "baseIds": ["docs"]}),
                lambda r: bool(data(r)["items"]),
            )
            assert data(hit)["items"][0]["conceptId"] == "extra.txt"

    anyio.run(story)


def test_allow_writes_adds_local_files_only_under_allow_path(
    home: Path, kb: Knowledge, docs: Base, src: Path, tmp_path: Path
) -> None:
    """Issue 26 item 10: the same roots as ``kb serve --allow-path``; a symlink loop is a clean
    tool error; without roots, --allow-writes adds no local file at all."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("a secret outside the roots", encoding="utf-8")
    (src / "inside.txt").write_text("a file about badgers", encoding="utf-8")
    (src / "loop").symlink_to(src / "loop")
    (src / "escape.txt").symlink_to(outside / "secret.txt")

    def add(path: Path) -> dict[str, Any]:
        return {"baseId": "docs", "action": "add", "type": "file", "path": str(path)}

    async def story() -> None:
        async with Client(server(home, "--allow-writes", "--allow-path", str(src))) as c:
            for path, code in (
                (outside / "secret.txt", "unsafe_path"),
                (src / "escape.txt", "unsafe_path"),  # resolved: it points outside
                (src / "loop", "invalid_input"),
            ):
                refused = await c.call_tool("kb_manage", add(path))
                assert refused.is_error, text(refused)
                assert data(refused)["code"] == code, data(refused)
                assert "Traceback" not in text(refused)
            added = await c.call_tool("kb_manage", add(src / "inside.txt"))
            assert not added.is_error, text(added)
        async with Client(server(home, "--allow-writes")) as c:
            refused = await c.call_tool("kb_manage", add(src / "inside.txt"))
            assert refused.is_error and data(refused)["code"] == "unsafe_path"
            assert "--allow-path" in data(refused)["error"]

    anyio.run(story)
    sources = {Path(i.source).name for i in kb.list_items(docs.id)}
    assert "secret.txt" not in sources and "escape.txt" not in sources


def test_a_damaged_catalog_still_serves_and_says_why(home: Path, docs: Base) -> None:
    """Issue 26 item 2: ``kb mcp`` starts on a damaged catalog; every tool answers with the
    reason (``catalog_unavailable``), never a traceback."""
    catalog = home / "catalog.sqlite"
    for extra in home.glob("catalog.sqlite-*"):
        extra.unlink()
    catalog.write_bytes(b"\x00not a catalog" * 4096)

    async def story() -> None:
        async with Client(server(home, "--base", "docs")) as c:
            listed = await c.call_tool("kb_list", {})
            assert listed.is_error and data(listed)["code"] == "catalog_unavailable"
            assert "not a SQLite database" in data(listed)["error"]
            found = await c.call_tool("kb_search", {"query": "tool", "baseIds": ["docs"]})
            assert "catalog" in text(found) and "Traceback" not in text(found)

    anyio.run(story)


def test_base_list_matching_nothing_refuses_to_start(home: Path, docs: Base) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", "mcp", "--home", str(home),
         "--base", "nope"],  # fmt: skip
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "matches no knowledge base" in proc.stderr
    assert proc.stdout == ""  # stdout belongs to the protocol


def test_stdio_newcomer_errors_and_compact_output(home: Path, docs: Base, kb: Knowledge) -> None:
    """Issue 25 (MCP): clear permanent errors, compact text, sync documented, honest approval."""
    kb.create_base("private")
    approver = Approver("accept")

    async def story() -> None:
        async with Client(server(home, "--base", "docs"), elicitation_callback=approver) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert "action=sync" in (tools["kb_manage"].description or "")
            props = tools["kb_search"].input_schema["properties"]["query"]
            assert (props["minLength"], props["maxLength"]) == (2, 200)

            hidden = await c.call_tool("kb_search", {"query": "install", "baseIds": ["private"]})
            assert hidden.is_error and data(hidden)["code"] == "not_found"
            assert "right now" not in text(hidden) and "retrying will not change" in text(hidden)

            short = await c.call_tool("kb_search", {"query": "x", "baseIds": ["docs"]})
            assert short.is_error and data(short)["code"] == "invalid_input"
            assert "2 to 200 characters" in text(short)
            assert "pydantic" not in text(short) and "http" not in text(short)

            listed = await c.call_tool("kb_list", {"baseId": "docs"})
            page = await c.call_tool("kb_read", {"baseId": "docs", "conceptId": "guide.md"})
            for body in (text(listed), text(page)):
                assert "\n " not in body and '": ' not in body  # no indentation, no spaces
            assert '"locator":{}' not in text(page)
            assert (
                "locator" not in data(page)["locators"][0] or data(page)["locators"][0]["locator"]
            )

            nothing = await c.call_tool(
                "kb_manage", {"baseId": "docs", "action": "delete", "conceptIds": ["nope.md"]}
            )
            assert nothing.is_error and data(nothing)["code"] == "not_found"
            assert approver.asked == []  # the user is not asked about documents that do not exist
            deleted = await c.call_tool(
                "kb_manage",
                {"baseId": "docs", "action": "delete", "conceptIds": ["guide.md", "nope.md"]},
            )
            assert data(deleted)["notFound"] == ["nope.md"]
            assert "1 document(s)" in approver.asked[0] and "nope.md" not in approver.asked[0]

    anyio.run(story)


def test_kb_tree_kb_grep_capabilities_and_search_details(
    home: Path, docs: Base, kb: Knowledge
) -> None:
    """Issue 27: the six tools' new parts over a real client session."""
    notes = [i for i in kb.list_items(docs.id) if i.type == "note"]
    kb.set_labels(docs.id, notes[0].id, tags=["geo"], metadata={"year": 2024})

    async def story() -> None:
        async with Client(server(home)) as c:
            listed = data(await c.call_tool("kb_list", {}))["items"][0]
            assert listed["mode"] == "bm25" and "keyword" in listed["capabilities"]
            assert listed["itemCounts"] == {"completed": 2} and listed["updatedAt"]

            tree = data(await c.call_tool("kb_tree", {"baseId": "docs", "maxDepth": 0}))
            assert [n.get("conceptId") for n in tree["nodes"]] == [
                "guide.md",
                "Paris is in France.md",
            ]
            grep = data(await c.call_tool(
                "kb_grep", {"baseId": "docs", "conceptId": "guide.md", "pattern": "pip|twice"}
            ))
            assert [m["line"] for m in grep["matches"]] == [3, 7]

            query = {"query": "install pip", "baseIds": ["docs"]}
            found = data(await c.call_tool("kb_search", query))
            top = found["items"][0]
            assert top["scoreKind"] == "keyword" and top["conceptId"] == "guide.md"
            assert any("Keyword-only" in n for n in found["notices"])

            tagged = data(await c.call_tool(
                "kb_search",
                {"query": "Paris France", "baseIds": ["docs"], "tags": ["geo"],
                 "where": {"year": {"gte": 2020}}},
            ))
            assert [h["conceptId"] for h in tagged["items"]] == ["Paris is in France.md"]
            assert any("tags=" in n for n in tagged["notices"])
            none = data(await c.call_tool(
                "kb_search", {"query": "install pip", "baseIds": ["docs"], "tags": ["geo"]}
            ))
            assert none["items"] == []

    anyio.run(story)
