"""MCP tool semantics in-process (the SDK's client on an in-memory transport): scope, merging,
paging, guidance, the SSRF guard and approval without a client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, types

from knowbase.errors import NotFound
from knowbase.interfaces.mcp import _camel, _decode_cursor, build_server, resolve_scope
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


def data(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result
    return result.structured_content


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def call(server: Any, name: str, args: dict[str, Any], **client: Any) -> types.CallToolResult:
    async def go() -> types.CallToolResult:
        async with Client(server, **client) as c:
            return await c.call_tool(name, args)

    return anyio.run(go)


@pytest.fixture
def two(kb: Knowledge) -> tuple[str, str]:
    a = kb.create_base("alpha", file_processor_id=None)
    b = kb.create_base("beta", file_processor_id=None)
    kb.add_note(a.id, "Shared sentence about comets.", title="c1")
    kb.add_note(b.id, "Shared sentence about comets.", title="c2")
    kb.add_note(b.id, "Comets have tails of dust.", title="tails")
    return a.id, b.id


def test_search_merges_dedupes_and_clamps(kb: Knowledge, two: tuple[str, str]) -> None:
    server = build_server(kb, base_ids=None, allow_writes=False)
    found = data(call(server, "kb_search", {"query": "comets", "baseIds": list(two)}))
    # Merged on the one absolute scale (search/multi_base.py), best first; the shared sentence
    # is listed once, under the base where it scored higher.
    texts = [h["content"] for h in found["items"]]
    assert sorted(texts) == ["Comets have tails of dust.", "Shared sentence about comets."]
    scores = [h["score"] for h in found["items"]]
    assert scores == sorted(scores, reverse=True)
    assert {h["baseId"] for h in found["items"]} <= set(two)
    assert all(0.0 <= h["score"] <= 1.0 for h in found["items"])
    assert len({h["id"] for h in found["items"]}) == 2


def test_restricted_scope(kb: Knowledge, two: tuple[str, str]) -> None:
    a, b = two
    server = build_server(kb, base_ids=[a], allow_writes=True)
    listed = data(call(server, "kb_list", {}))
    assert [i["name"] for i in listed["items"]] == ["alpha"]
    denied = call(server, "kb_read", {"baseId": "beta", "conceptId": "c2.md"})
    assert denied.is_error
    assert data(denied)["error"] == 'Knowledge base "beta" is not available to this assistant.'
    # Unknown bases look the same as out-of-scope ones: the scope leaks no names.
    unknown = call(server, "kb_list", {"baseId": "nope"})
    assert data(unknown)["error"] == 'Knowledge base "nope" is not available to this assistant.'
    partial = data(call(server, "kb_search", {"query": "comets", "baseIds": [a, b]}))
    assert [h["baseId"] for h in partial["items"]] == [a]
    assert "not available" in partial["failedBases"][b]
    every = call(server, "kb_search", {"query": "comets", "baseIds": [b]})
    # not "could not be searched right now": it is permanent, and says so (issue 25)
    assert every.is_error and data(every)["code"] == "not_found"
    assert "retrying will not change" in data(every)["error"] and "kb_list" in data(every)["error"]
    write = call(
        server, "kb_manage", {"baseId": b, "action": "add", "type": "note", "content": "x"}
    )
    assert write.is_error and "not available" in data(write)["error"]
    assert kb.counts(b) == {"completed": 2}


def test_empty_scope_fails_closed(kb: Knowledge, two: tuple[str, str]) -> None:
    server = build_server(kb, base_ids=[], allow_writes=True)
    listed = call(server, "kb_list", {})
    assert not listed.is_error and "No knowledge base is configured" in text(listed)
    for name, args in (
        ("kb_list", {"baseId": "alpha"}),
        ("kb_read", {"baseId": "alpha", "conceptId": "c1.md"}),
        ("kb_manage", {"baseId": "alpha", "action": "delete", "conceptIds": ["c1.md"]}),
    ):
        result = call(server, name, args)
        assert result.is_error and "not available" in data(result)["error"], name
    assert call(server, "kb_search", {"query": "comets", "baseIds": ["alpha"]}).is_error
    assert kb.counts("alpha") == {"completed": 1}


def test_list_query_paging_and_stale_cursor(kb: Knowledge) -> None:
    for name in ("one", "two", "three"):
        kb.create_base(name, file_processor_id=None)
    kb.add_note("two", "A note mentioning zeppelins\nsecond line", title=None)
    server = build_server(kb, base_ids=None, allow_writes=False)
    first = data(call(server, "kb_list", {"limit": 2}))
    assert [i["name"] for i in first["items"]] == ["one", "two"] and first["total"] == 3
    second = data(call(server, "kb_list", {"limit": 2, "cursor": first["nextCursor"]}))
    assert [i["name"] for i in second["items"]] == ["three"] and "nextCursor" not in second
    stale = call(server, "kb_list", {"cursor": "garbage!"})
    assert not stale.is_error and "stale" in text(stale)
    assert _decode_cursor(first["nextCursor"]) == 2
    by_content = data(call(server, "kb_list", {"query": "ZEPPELIN"}))
    assert [i["name"] for i in by_content["items"]] == ["two"]
    assert by_content["items"][0]["sampleSources"] == ["A note mentioning zeppelins"]
    nothing = call(server, "kb_list", {"query": "nothing-like-this"})
    assert "No knowledge base matches" in text(nothing)
    empty = call(server, "kb_list", {"baseId": "one"})
    assert "is empty" in text(empty)


def test_manage_url_goes_through_ssrf_guard(kb: Knowledge) -> None:
    kb.create_base("web", file_processor_id=None)
    server = build_server(kb, base_ids=None, allow_writes=True)
    for url in ("http://127.0.0.1:9/x", "http://169.254.169.254/latest", "file:///etc/passwd"):
        result = call(
            server, "kb_manage", {"baseId": "web", "action": "add", "type": "url", "url": url}
        )
        assert result.is_error and data(result)["code"] == "invalid_url", url
    assert kb.counts("web") == {}


def test_manage_refuses_bad_adds_before_asking(kb: Knowledge, tmp_path: Path) -> None:
    kb.create_base("b", file_processor_id=None)
    server = build_server(kb, base_ids=None, allow_writes=False)
    asked: list[str] = []

    async def never(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    for args, needle in (
        ({"action": "add"}, "needs type"),
        ({"action": "add", "type": "file", "path": "relative.txt"}, "absolute path"),
        ({"action": "add", "type": "note", "content": "   "}, "needs some text"),
        ({"action": "add", "type": "file", "path": str(tmp_path / "missing.txt")}, "not found"),
        ({"action": "add", "type": "file", "path": str(tmp_path)}, "not found"),
        ({"action": "add", "type": "url", "url": "http://10.1.2.3/"}, "private"),
        ({"action": "refresh"}, "non-empty conceptIds"),
    ):
        result = call(server, "kb_manage", {"baseId": "b", **args}, elicitation_callback=never)
        assert result.is_error and needle in data(result)["error"], args
    assert asked == [] and kb.counts("b") == {}
    (tmp_path / "ok.txt").write_text("fine", encoding="utf-8")
    ok = {"action": "add", "type": "file", "path": str(tmp_path / "ok.txt")}
    assert not call(server, "kb_manage", {"baseId": "b", **ok}, elicitation_callback=never).is_error
    assert len(asked) == 1


def test_resolve_scope(kb: Knowledge, two: tuple[str, str]) -> None:
    a, b = two
    assert resolve_scope(kb, None) is None
    assert resolve_scope(kb, ["alpha", b, "nope", a]) == [a, b]
    with pytest.raises(NotFound, match="refusing to start"):
        resolve_scope(kb, ["nope", "nada"])


def test_camel_keeps_locator_keys() -> None:
    assert _camel({"char_start": 1, "locator": {"sheet_name": "x"}, "list_of": [{"a_b": 1}]}) == {
        "charStart": 1,
        "locator": {"sheet_name": "x"},
        "listOf": [{"aB": 1}],
    }


def test_manage_sync_adds_and_changes_but_never_deletes(kb: Knowledge, tmp_path: Path) -> None:
    """kb_manage action sync: a new file is added and an edited one reindexed; a vanished file
    is reported and kept, even where the base would prune (an agent cannot delete by surprise)."""
    from knowbase.operations.add.inputs import AddInput

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "keep.md").write_text("Otters hold hands.", encoding="utf-8")
    (folder / "edit.md").write_text("Comets are icy.", encoding="utf-8")
    (folder / "gone.md").write_text("Old page about ferns.", encoding="utf-8")
    base = kb.create_base("synced", file_processor_id=None)
    kb.add(base.id, [AddInput.directory(folder)], wait=True)
    kb.update_base("synced", sync_deletes=True)
    (folder / "new.md").write_text("Volcanoes erupt.", encoding="utf-8")
    (folder / "edit.md").write_text("Comets are icy and dusty, with long tails.", encoding="utf-8")
    (folder / "gone.md").unlink()
    server = build_server(kb, base_ids=None, allow_writes=True)
    result = call(server, "kb_manage", {"baseId": "synced", "action": "sync"})
    assert not result.is_error, text(result)
    got = data(result)
    assert (got["added"], got["changed"], got["vanished"], got["failed"]) == (1, 1, 1, 0)
    kb.wait([got["jobId"]], timeout_s=60)
    items = {Path(i.source).name: i for i in kb.list_items(base.id) if i.type == "file"}
    assert {s: i.status for s, i in items.items()} == dict.fromkeys(
        ("keep.md", "edit.md", "gone.md", "new.md"), "completed"
    ), "a sync from an agent deleted a file, or left one unfinished"
    assert kb.search("synced", "long tails").results
    assert kb.search("synced", "volcanoes").results


def test_kb_manage_add_carries_tags_and_metadata(kb: Knowledge) -> None:
    """Issue 27: labels set at add time through MCP, then a tag filter finds the note."""
    base = kb.create_base("labelled", file_processor_id=None)
    server = build_server(kb, base_ids=None, allow_writes=True)
    args = {
        "baseId": "labelled",
        "action": "add",
        "type": "note",
        "title": "orbit",
        "content": "Comets orbit the sun.",
        "tags": ["astro"],
        "metadata": {"year": 2024},
    }
    added = data(call(server, "kb_manage", args))
    assert added["added"], added
    kb.run_until_idle(60)
    item = kb.list_items(base.id)[0]
    assert (item.tags, item.metadata) == (["astro"], {"year": 2024})
    query = {"query": "comets orbit", "baseIds": ["labelled"], "tags": ["astro"]}
    assert [h["title"] for h in data(call(server, "kb_search", query))["items"]] == ["orbit"]
    query["tags"] = ["other"]
    assert data(call(server, "kb_search", query))["items"] == []
