"""An agent's "what are the sections of X, and what does section 3 say?" over a real MCP client
session: ``kb_outline``, then ``kb_read`` with ``section``, every reply under 8 KB.

The SDK's own client on its in-memory transport, against the real server (``build_server``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, types

from knowbase.catalog.models import Base
from knowbase.interfaces.mcp import build_server
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(90)

REPLY_MAX_BYTES = 8 * 1024
SECTIONS = ["Summary", "Background", "Method", "Results", "Discussion"]


def section_text(name: str) -> str:
    sentence = f"The {name.lower()} of the turbine study says this, in some detail. "
    return "\n\n".join(sentence * 8 for _ in range(6))


@pytest.fixture
def study(kb: Knowledge, src: Path) -> Base:
    base = kb.create_base("studies", file_processor_id=None)
    body = "\n\n".join(f"## {name}\n\n{section_text(name)}" for name in SECTIONS)
    (src / "study.md").write_text(f"# Turbine study\n\nA preface.\n\n{body}\n", encoding="utf-8")
    many = "\n\n".join(
        f"## Part {n}\n\nText of part {n}.\n\n### Detail {n}\n\nMore." for n in range(150)
    )
    (src / "handbook.md").write_text(f"# Handbook\n\n{many}\n", encoding="utf-8")
    kb.add(
        base.id, [AddInput.file(src / "study.md"), AddInput.file(src / "handbook.md")], wait=True
    )
    return base


def reply(result: types.CallToolResult) -> tuple[dict[str, Any], int]:
    """The structured reply and the size of the text an agent reads, in bytes."""
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    assert result.structured_content is not None, block.text
    return result.structured_content, len(block.text.encode("utf-8"))


def test_sections_of_a_document_then_section_three(kb: Knowledge, study: Base) -> None:
    async def story() -> None:
        async with Client(build_server(kb, base_ids=None, allow_writes=False)) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert tools["kb_outline"].annotations.read_only_hint is True
            assert "section" in tools["kb_read"].input_schema["properties"]
            listed = reply(await c.call_tool("kb_list", {}))[0]["items"][0]
            assert "outline" in listed["capabilities"]

            # "What are the sections of the turbine study?"
            outline, size = reply(
                await c.call_tool("kb_outline", {"baseId": "studies", "conceptId": "study.md"})
            )
            assert size < REPLY_MAX_BYTES
            sections = [n for n in outline["nodes"] if n["depth"] == 1]
            assert [n["title"] for n in sections] == SECTIONS
            assert all(n["tokens"] > 100 and n["locator"]["heading"] for n in sections)
            third = sections[2]

            # "What does section 3 say?"
            read, size = reply(
                await c.call_tool(
                    "kb_read",
                    {"baseId": "studies", "conceptId": "study.md", "section": third["id"]},
                )
            )
            assert size < REPLY_MAX_BYTES
            assert read["section"]["title"] == "Method" and read["id"].startswith("kb-")
            assert read["content"].startswith("## Method")
            assert "Results" not in read["content"]
            text = kb.concepts.read_concept("studies", "study.md")["content"]
            section = text[third["charStart"] : third["charEnd"]]
            pieces = [read["content"]]
            while read.get("nextCursor"):  # a section longer than the budget reads on
                read, size = reply(
                    await c.call_tool(
                        "kb_read",
                        {"baseId": "studies", "conceptId": "study.md",
                         "cursor": read["nextCursor"]},
                    )
                )  # fmt: skip
                assert size < REPLY_MAX_BYTES
                pieces.append(read["content"])
            assert "".join(pieces).split() == section.split()

            # The same section by its heading path, and a small budget with a cursor.
            small, _ = reply(
                await c.call_tool(
                    "kb_read",
                    {"baseId": "studies", "conceptId": "study.md",
                     "section": "Turbine study > Method", "maxTokens": 150},
                )
            )  # fmt: skip
            assert small["content"].startswith("## Method") and small["truncated"] is True
            assert small["nextCursor"].startswith(third["id"] + "@")

            mixed = await c.call_tool(
                "kb_read",
                {"baseId": "studies", "conceptId": "study.md", "section": "1.3",
                 "pattern": "turbine"},
            )  # fmt: skip
            assert mixed.is_error and "pattern" in mixed.content[0].text  # type: ignore[union-attr]

            unknown = await c.call_tool(
                "kb_read", {"baseId": "studies", "conceptId": "study.md", "section": "Epilogue"}
            )
            assert unknown.is_error
            said = json.loads(unknown.content[0].text)  # type: ignore[union-attr]
            assert said["code"] == "not_found" and "kb_outline" in said["guidance"]

    anyio.run(story)


def test_a_large_outline_fits_the_reply_by_showing_fewer_levels(kb: Knowledge, study: Base) -> None:
    async def story() -> None:
        async with Client(build_server(kb, base_ids=None, allow_writes=False)) as c:
            full = kb.concepts.outline("studies", "handbook.md")
            assert full["total_nodes"] == 301
            outline, size = reply(
                await c.call_tool("kb_outline", {"baseId": "studies", "conceptId": "handbook.md"})
            )
            assert size < REPLY_MAX_BYTES
            ids = [n["id"] for n in outline["nodes"]]
            # The title and the first parts in order: the level that did not fit whole is
            # shown as far as it fits, and nothing deeper.
            assert ids[:3] == ["1", "1.1", "1.2"] and 10 < len(ids) < 150
            assert ids == ["1"] + [f"1.{n}" for n in range(1, len(ids))]
            assert "not shown" in outline["notices"][0] and "under=" in outline["notices"][0]
            part, size = reply(
                await c.call_tool(
                    "kb_outline",
                    {"baseId": "studies", "conceptId": "handbook.md", "under": "1.42"},
                )
            )
            assert [(n["id"], n["title"], n["depth"]) for n in part["nodes"]] == [
                ("1.42", "Part 41", 0),
                ("1.42.1", "Detail 41", 1),
            ]
            assert "notices" not in part

    anyio.run(story)
