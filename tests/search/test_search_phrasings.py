"""Several phrasings in one search (issue 44 item 2): each runs through both lanes, the lists
fuse by reciprocal rank, a passage found by several phrasings ranks first, the list is the same
on every call, and more than five phrasings are refused."""

from __future__ import annotations

import pytest

from knowbase.errors import InvalidInput
from knowbase.operations.add.inputs import AddInput
from knowbase.search.phrasings import fused_order
from knowbase.service import Knowledge


@pytest.fixture
def notes(kb: Knowledge) -> str:
    base = kb.create_base("notes", file_processor_id=None)
    kb.add(
        base.id,
        [
            AddInput.note("The ferry timetable changes in winter.", title="ferry"),
            AddInput.note("Winter tyres are required on mountain roads.", title="tyres"),
            AddInput.note("The ferry crossing takes forty minutes.", title="crossing"),
            AddInput.note("Mountain huts close in October.", title="huts"),
        ],
        wait=True,
    )
    return base.id


def _titles(response) -> list[str]:  # type: ignore[no-untyped-def]
    return [r.title for r in response.results]


def test_a_passage_found_by_two_phrasings_ranks_first(kb: Knowledge, notes: str) -> None:
    one = kb.search(notes, "winter schedule")
    two = kb.search(notes, "ferry crossing")
    assert "ferry" in _titles(one) and "ferry" in _titles(two)
    fused = kb.search(notes, "winter schedule", also=["ferry crossing"])
    assert _titles(fused)[0] == "ferry"  # the only passage both phrasings found
    assert set(_titles(fused)) == set(_titles(one)) | set(_titles(two))
    assert [r.rank for r in fused.results] == list(range(1, len(fused.results) + 1))
    assert fused.explain["found_by"][fused.results[0].chunk_id] == 2
    assert [p["query"] for p in fused.explain["phrasings"]] == ["winter schedule", "ferry crossing"]


def test_the_fused_list_is_the_same_on_every_call(kb: Knowledge, notes: str) -> None:
    calls = [kb.search(notes, "mountain", also=["winter", "ferry"]) for _ in range(3)]
    assert len({tuple(r.chunk_id for r in c.results) for c in calls}) == 1
    assert len({tuple(r.score for r in c.results) for c in calls}) == 1


def test_one_phrasing_is_an_ordinary_search_and_six_are_refused(kb: Knowledge, notes: str) -> None:
    plain = kb.search(notes, "ferry")
    same = kb.search(notes, "ferry", also=["ferry", " "])  # duplicates and blanks dropped
    assert [r.chunk_id for r in same.results] == [r.chunk_id for r in plain.results]
    with pytest.raises(InvalidInput, match="at most 5 phrasings"):
        kb.search(notes, "a", also=["b", "c", "d", "e", "f"])


def test_reciprocal_rank_orders_by_lists_then_rank() -> None:
    assert fused_order([["a", "b"], ["b", "c"]]) == ["b", "a", "c"]
    assert fused_order([["x"], ["y"]]) == ["x", "y"]  # a tie breaks on the id: deterministic


def test_the_surfaces_take_more_phrasings(kb: Knowledge, notes: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """HTTP ``also`` (GET and POST), the CLI's ``--also``: the same fused list as the facade."""
    import os
    import subprocess
    import sys

    from fastapi.testclient import TestClient

    from knowbase.interfaces.http import create_app

    fused = kb.search(notes, "winter schedule", also=["ferry crossing"])
    want = [r.chunk_id for r in fused.results]
    with TestClient(create_app(kb), base_url="http://127.0.0.1") as client:
        got = client.post(
            "/bases/notes/search", json={"query": "winter schedule", "also": ["ferry crossing"]}
        )
        assert [r["chunk_id"] for r in got.json()["results"]] == want, got.text
        got = client.get(
            "/bases/notes/search", params={"q": "winter schedule", "also": ["ferry crossing"]}
        )
        assert [r["chunk_id"] for r in got.json()["results"]] == want, got.text
        refused = client.post(
            "/bases/notes/search", json={"query": "a", "also": ["b", "c", "d", "e", "f"]}
        )
        assert refused.status_code == 422
    settings = kb.settings  # the CLI opens the same home on every backend the suite runs
    env = {**os.environ, "KNOWBASE_HOME": str(settings.home), "KNOWBASE_TEST_PROVIDERS": "1"}
    for name, value in (
        ("KNOWBASE_DATABASE_URL", settings.database_url),
        ("KNOWBASE_QDRANT_URL", settings.qdrant_url),
        ("KNOWBASE_MATERIALS_ROOT", settings.materials_root),
        ("KNOWBASE_INDEX_BACKEND", settings.default_index_backend),
    ):
        if value:
            env[name] = str(value)
    done = subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", "search", "notes", "winter schedule",
         "--also", "ferry crossing", "--json"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    import json

    assert [r["chunk_id"] for r in json.loads(done.stdout)["results"]] == want


def test_kb_search_takes_more_phrasings_over_mcp(kb: Knowledge, notes: str) -> None:
    """The MCP tool's ``alsoQueries``, through the official client on the real server."""
    import anyio
    from mcp import Client

    from knowbase.interfaces.mcp import build_server

    async def go() -> dict:  # type: ignore[type-arg]
        async with Client(build_server(kb, base_ids=None, allow_writes=False)) as c:
            args = {"query": "winter schedule", "baseIds": ["notes"]}
            result = await c.call_tool("kb_search", {**args, "alsoQueries": ["ferry crossing"]})
            assert result.structured_content is not None, result
            return result.structured_content

    found = anyio.run(go)
    assert found["items"][0]["title"] == "ferry", found["items"][0]
