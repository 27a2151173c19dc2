"""What the official ``mcp`` client sees when an agent errs or asks much (issue 43): argument
mistakes as ``invalid_input`` guidance, unknown arguments refused, ``kb_search`` within a
character budget, a base still embedding shown as such, a grep that gave up saying so.

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


def call(server: Any, name: str, args: dict[str, Any]) -> types.CallToolResult:
    async def go() -> types.CallToolResult:
        async with Client(server) as c:
            return await c.call_tool(name, args)

    return anyio.run(go)


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.fixture
def long_docs(kb: Knowledge) -> Base:
    """Twelve long notes that all answer "turbine": a search gives many big passages."""
    base = kb.create_base("manuals", file_processor_id=None)
    notes = [
        AddInput.note(
            "\n\n".join(
                f"Section {s} of manual {n}: the turbine blade {s} is inspected yearly, "
                + "torque and wear are logged in the maintenance book. " * 6
                for s in range(12)
            ),
            title=f"manual {n}",
        )
        for n in range(12)
    ]
    kb.add(base.id, notes, wait=True)
    return base


@pytest.fixture
def server(kb: Knowledge) -> Any:
    return build_server(kb, base_ids=None, allow_writes=False)


# --- 12: argument mistakes -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tool", "args", "argument"),
    [
        ("kb_search", {"query": "turbine"}, "baseIds"),
        ("kb_read", {"baseId": "manuals", "conceptId": "x", "charStart": -5}, "charStart"),
        ("kb_search", {"query": "turbine", "baseIds": ["manuals"], "context": 0}, "context"),
    ],
    ids=["search-without-bases", "read-negative-start", "context-zero"],
)
def test_argument_mistakes_are_invalid_input_guidance(
    server: Any, long_docs: Base, tool: str, args: dict, argument: str
) -> None:
    result = call(server, tool, args)
    assert result.is_error
    said = text(result)
    assert "pydantic" not in said and "validation error for" not in said
    assert argument in said
    data = result.structured_content or json.loads(said)
    assert data["code"] == "invalid_input" and data["guidance"]
    assert data["arguments"] == [argument]


def test_an_unknown_argument_is_an_error(server: Any, long_docs: Base) -> None:
    result = call(server, "kb_read", {"baseId": "manuals", "conceptId": "x", "topK": 3})
    assert result.is_error
    assert "topK" in text(result) and "conceptId" in text(result)
    assert (result.structured_content or {})["code"] == "invalid_input"


# --- 13: kb_search within a budget ---------------------------------------------------------------
def test_search_stays_within_the_default_budget(server: Any, long_docs: Base) -> None:
    result = call(server, "kb_search", {"query": "turbine blade", "baseIds": ["manuals"]})
    assert not result.is_error
    assert len(text(result)) <= 8_000
    items = (result.structured_content or {})["items"]
    assert items, text(result)
    # every passage still holds the chunk that matched, and says where it was cut
    assert all("turbine" in i["content"].lower() for i in items)
    for i in items:
        assert len(repr(i["score"]).split(".")[-1]) <= 4
        assert i["charEnd"] - i["charStart"] == len(i["content"])


def test_top_k_and_max_chars_ask_for_less(server: Any, long_docs: Base, kb: Knowledge) -> None:
    one = call(server, "kb_search", {"query": "turbine", "baseIds": ["manuals"], "topK": 1})
    assert len((one.structured_content or {})["items"]) == 1
    small = call(
        server, "kb_search", {"query": "turbine", "baseIds": ["manuals"], "maxChars": 1000}
    )
    assert len(text(small)) <= 1000
    data = small.structured_content or {}
    cut = [i for i in data["items"] if i.get("truncated")]
    assert cut and any("maxChars" in n for n in data["notices"])
    # a cut passage's offsets are those of the text returned: kb_read continues from them
    first = cut[0]
    page = kb.concepts.read_concept(
        long_docs.id, first["conceptId"], char_start=first["charStart"], char_end=first["charEnd"]
    )
    assert page["content"] == first["content"]


# --- 13: kb_list while a base embeds --------------------------------------------------------
def row_of(server: Any, name: str) -> dict[str, Any]:
    items = (call(server, "kb_list", {}).structured_content or {})["items"]
    return next(r for r in items if r["name"] == name)


def test_kb_list_shows_a_base_still_being_indexed(kb: Knowledge, server: Any) -> None:
    base = kb.create_base("growing", file_processor_id=None)
    kb.add(base.id, [AddInput.note(f"Note {n}", title=f"n{n}") for n in range(3)])
    row = row_of(server, "growing")  # no worker runs: nothing is indexed yet
    assert row["status"] == "indexing" and row["itemsIndexing"] == 3, row


def test_kb_list_counts_the_files_of_a_folder(kb: Knowledge, server: Any, src: Path) -> None:
    base = kb.create_base("folder", file_processor_id=None)
    folder = src / "docs"
    folder.mkdir()
    for n in range(5):
        (folder / f"f{n}.md").write_text(f"# File {n}\n\nText {n}.", encoding="utf-8")
    kb.add(base.id, [AddInput.directory(folder)], wait=True)
    row = row_of(server, "folder")
    assert row["status"] == "completed" and "itemsIndexing" not in row
    assert row["itemCount"] == 5  # its five files (counts are files: issue 42 item 5), not "1"


# --- 14: a grep that ran out of time -----------------------------------------------------------
def test_a_grep_that_stopped_early_says_so_in_its_text(kb: Knowledge, server: Any) -> None:
    base = kb.create_base("redos", file_processor_id=None)
    kb.add(base.id, [AddInput.note("a" * 40_000 + "!\nsecond line", title="redos")], wait=True)
    concept = kb.list_items(base.id)[0].concept_id
    result = call(server, "kb_grep", {"baseId": "redos", "conceptId": concept, "pattern": "(a+)+$"})
    said = text(result)
    assert (result.structured_content or {})["partial"] is True
    assert "stopped early" in said and "No line of" not in said
    assert "does not mean" in said
