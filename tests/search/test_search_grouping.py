"""Document-level ranking (issue 40 item 4): ``group="document"`` gives one entry per document,
scored by its best passage, its best passages as citations — through the facade, HTTP (GET and
POST), the CLI's ``--group`` and MCP's ``group``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from knowbase.errors import InvalidInput
from knowbase.operations.add.inputs import AddInput
from knowbase.search.grouping import MAX_CITATIONS, document_scores
from knowbase.service import Knowledge

# A long document about ferries (one passage per paragraph at 16 tokens a chunk), then short ones.
LONG = "\n\n".join(
    f"The ferry to island {n} leaves from pier {n} and the ferry returns at dusk." for n in range(6)
)


@pytest.fixture
def harbour(kb: Knowledge) -> str:
    base = kb.create_base("harbour", file_processor_id=None, chunk_size=16, chunk_overlap=0)
    kb.add(
        base.id,
        [
            AddInput.note(LONG, title="timetable"),
            AddInput.note("Ferry tickets are sold at the kiosk.", title="tickets"),
            AddInput.note("A ferry strike closed the harbour in May.", title="strike"),
            AddInput.note("Mountain huts close in October.", title="huts"),
        ],
        wait=True,
    )
    return base.id


def test_one_entry_per_document_with_its_best_passages_cited(kb: Knowledge, harbour: str) -> None:
    passages = kb.search(harbour, "ferry", top_k=3)
    assert [r.title for r in passages.results] == ["timetable"] * 3  # one paper crowds the page
    grouped = kb.search(harbour, "ferry", top_k=3, group="document")
    titles = [r.title for r in grouped.results]
    assert sorted(titles) == ["strike", "tickets", "timetable"], titles
    assert [r.rank for r in grouped.results] == [1, 2, 3]
    assert grouped.explain["group"]["by"] == "document"
    for r in grouped.results:
        cites = r.citations or []
        assert cites[0]["chunk_id"] == r.chunk_id and cites[0]["score"] == r.score  # the best
        assert [c["score"] for c in cites] == sorted((c["score"] for c in cites), reverse=True)
    timetable = next(r for r in grouped.results if r.title == "timetable")
    assert len(timetable.citations or []) == MAX_CITATIONS  # six passages match: three cited
    assert len({c["chunk_id"] for c in timetable.citations or []}) == MAX_CITATIONS
    # the document's score is its best passage's: the passage list's first score
    assert timetable.score == passages.results[0].score


def test_a_document_scores_by_its_best_passage_unless_damping_adds_the_next() -> None:
    hits = [("a", 0.6), ("b", 0.5), ("b", 0.5), ("b", 0.4)]
    assert [(d, s) for d, s, _ in document_scores(hits)] == [("a", 0.6), ("b", 0.5)]
    damped = document_scores(hits, 0.5)
    assert [d for d, _, _ in damped] == ["b", "a"]
    assert damped[0][1] == pytest.approx(0.5 + 0.25 + 0.1)
    assert damped[0][2] == [1, 2, 3]
    assert [d for d, _, _ in document_scores([("x", 0.5), ("y", 0.5)])] == ["x", "y"]  # ties


def test_an_unknown_group_is_refused(kb: Knowledge, harbour: str) -> None:
    with pytest.raises(InvalidInput, match="group must be one of"):
        kb.search(harbour, "ferry", group="paragraph")


def test_the_surfaces_group_by_document(kb: Knowledge, harbour: str) -> None:
    """HTTP ``group`` (GET and POST) and the CLI's ``--group``: the facade's list."""
    from fastapi.testclient import TestClient

    from knowbase.interfaces.http import create_app

    want = [r.item_id for r in kb.search(harbour, "ferry", top_k=3, group="document").results]
    with TestClient(create_app(kb), base_url="http://127.0.0.1") as client:
        body = {"query": "ferry", "top_k": 3, "group": "document"}
        got = client.post("/bases/harbour/search", json=body)
        assert [r["item_id"] for r in got.json()["results"]] == want, got.text
        assert all(r["citations"] for r in got.json()["results"])
        got = client.get(
            "/bases/harbour/search", params={"q": "ferry", "top_k": 3, "group": "document"}
        )
        assert [r["item_id"] for r in got.json()["results"]] == want, got.text
        bad = client.post("/bases/harbour/search", json={**body, "group": "page"})
        assert bad.status_code == 422
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
        [sys.executable, "-m", "knowbase.interfaces.cli", "search", "harbour", "ferry",
         "--top-k", "3", "--group", "document", "--json"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [r["item_id"] for r in json.loads(done.stdout)["results"]] == want


def test_kb_search_groups_by_document_over_mcp(kb: Knowledge, harbour: str) -> None:
    """The MCP tool's ``group``, through the official client on the real server."""
    import anyio
    from mcp import Client

    from knowbase.interfaces.mcp import build_server

    async def go() -> dict:  # type: ignore[type-arg]
        async with Client(build_server(kb, base_ids=None, allow_writes=False)) as c:
            args = {"query": "ferry", "baseIds": ["harbour"], "topK": 3, "group": "document"}
            result = await c.call_tool("kb_search", args)
            assert result.structured_content is not None, result
            return result.structured_content

    found = anyio.run(go)
    titles = [i["title"] for i in found["items"]]
    assert sorted(titles) == ["strike", "tickets", "timetable"], found["items"]
    timetable = next(i for i in found["items"] if i["title"] == "timetable")
    assert len(timetable["citations"]) == MAX_CITATIONS
