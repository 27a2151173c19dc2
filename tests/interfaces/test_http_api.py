"""The HTTP API over real HTTP on loopback: uvicorn in a thread, an httpx client.

BM25-only bases and the deterministic ``hash:d64`` embeddings: no model loads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from knowbase.interfaces.http import create_app
from knowbase.service import Knowledge
from knowbase.settings import load_settings
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def roots(tmp_path: Path) -> Path:
    root = tmp_path / "served"
    root.mkdir()
    return root


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[Knowledge]:
    with Knowledge(load_settings(tmp_path / "home"), start_workers=True) as kb:
        yield kb


@pytest.fixture
def client(kb: Knowledge, roots: Path, live_server) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    url = live_server(create_app(kb, local_path_roots=[roots], max_upload_bytes=64 * 1024))
    with httpx.Client(base_url=url, timeout=20) as c:
        yield c


def sse_events(response: httpx.Response) -> Iterator[tuple[str, dict]]:
    """Parse an SSE stream into (event, data) pairs."""
    event, data = None, []
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif not line and event:
            yield event, json.loads("\n".join(data))
            event, data = None, []


def assert_error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code
    assert isinstance(body["message"], str) and body["message"]
    assert isinstance(body["details"], dict)
    return body


def test_add_progress_search_read_delete_cycle(client: httpx.Client) -> None:
    r = client.post("/bases", json={"name": "Docs", "embedding_model_id": "hash:d64"})
    assert r.status_code == 201, r.text
    base = r.json()
    assert base["dimensions"] == 64

    text = "# Capitals\n\nParis is the capital of France.\n\nBerlin is the capital of Germany.\n"
    with client.stream("GET", "/bases/docs/events") as stream:
        r = client.post(
            "/bases/docs/items",
            json={"inputs": [{"type": "note", "content": text, "title": "capitals"}]},
        )
        assert r.status_code == 201, r.text
        added = r.json()
        item_id = added["items"][0]["id"]
        assert added["status"] == "added" and added["job_ids"]
        seen_item, seen_job = [], []
        for event, data in sse_events(stream):
            if event == "item" and data["id"] == item_id:
                seen_item.append(data["status"])
            if event == "job" and data["id"] in added["job_ids"]:
                seen_job.append(data["status"])
                assert set(data["progress"]) == {"stage", "percent", "details"}
            if "completed" in seen_item and "completed" in seen_job:
                break
    assert seen_item[-1] == "completed" and seen_job[-1] == "completed"

    job = client.get(f"/jobs/{added['job_ids'][0]}").json()
    assert job["status"] == "completed" and job["progress"]["percent"] == 100
    assert [j["id"] for j in client.get("/jobs", params={"base": "docs"}).json()] == added[
        "job_ids"
    ]

    hits = client.get("/bases/docs/search", params={"q": "capital of Germany"}).json()
    assert hits["mode"] == "hybrid"
    top = hits["results"][0]
    assert "Berlin" in top["text"] and top["base_name"] == "Docs"
    assert text[top["char_start"] : top["char_end"]] == top["text"]
    posted = client.post("/bases/docs/search", json={"query": "capital of Germany"}).json()
    assert posted["results"] == hits["results"]

    concept = top["concept_id"]
    page = client.get("/bases/docs/concepts/read", params={"concept_id": concept}).json()
    assert "Berlin is the capital of Germany." in page["content"]
    grep = client.get(
        "/bases/docs/concepts/grep", params={"concept_id": concept, "pattern": "berl\\w+"}
    ).json()
    assert grep["total_matches"] == 1 and grep["matches"][0]["snippet"].startswith("Berlin")
    tree = client.get("/bases/docs/concepts/tree").json()
    assert [n["concept_id"] for n in tree["nodes"]] == [concept]
    chunks = client.get(f"/bases/docs/items/{item_id}/chunks").json()
    assert chunks and all(text[c["char_start"] : c["char_end"]] == c["text"] for c in chunks)

    r = client.delete(f"/bases/docs/items/{item_id}")
    assert r.status_code == 202 and r.json()["job_id"]
    assert_error(client.get(f"/bases/docs/items/{item_id}"), 404, "not_found")
    assert client.get("/bases/docs/search", params={"q": "capital"}).json()["results"] == []
    wait_until(
        lambda: client.get(f"/jobs/{r.json()['job_id']}").json()["status"] == "completed", 20
    )
    assert client.get("/bases/docs/items").json() == []

    assert client.delete(f"/bases/{base['id']}").json() == {
        "id": base["id"],
        "deleted": True,
        "job_id": None,
    }
    assert_error(client.get("/bases/docs"), 404, "not_found")


def test_events_end_when_the_base_is_deleted(client: httpx.Client) -> None:
    client.post("/bases", json={"name": "gone"}).raise_for_status()
    with client.stream("GET", "/bases/gone/events") as stream:
        client.delete("/bases/gone").raise_for_status()
        events = list(sse_events(stream))  # the server ends the stream
    assert events[-1] == ("base", {"id": events[-1][1]["id"], "status": "deleted"})


def test_multipart_upload_is_stored_like_a_local_file(client: httpx.Client, kb) -> None:
    client.post("/bases", json={"name": "up"}).raise_for_status()
    files = [
        ("files", ("notes.md", b"# Notes\n\nupload works over multipart\n", "text/markdown")),
        ("files", ("notes.md", b"second file with the same name\n", "text/markdown")),
    ]
    r = client.post("/bases/up/uploads", files=files)
    assert r.status_code == 201, r.text
    items = r.json()["items"]
    assert [i["origin"] for i in items] == [None, None]
    assert [i["data"]["relative_path"] for i in items] == ["notes.md", "notes_1.md"]
    wait_until(
        lambda: all(i["status"] == "completed" for i in client.get("/bases/up/items").json()), 20
    )
    raw = kb.rt.storage(kb.get_base("up").id)
    assert (raw.raw / "notes.md").read_bytes().startswith(b"# Notes")
    hit = client.get("/bases/up/search", params={"q": "multipart"}).json()["results"][0]
    assert hit["concept_id"] == "notes.md"

    r = client.post(
        "/bases/up/uploads",
        files={"files": ("notes.md", b"x\n", "text/markdown")},
        data={"conflict": "detect"},
    )
    body = assert_error(r, 409, "conflict")
    assert body["details"]["conflicts"][0]["title"] == "notes.md"

    big = b"a" * (64 * 1024 + 1)
    r = client.post("/bases/up/uploads", files={"files": ("big.md", big, "text/markdown")})
    assert_error(r, 413, "payload_too_large")
    exe = b"MZ\x90\x00\x03\x00"  # binary: a text file of any name is read (issue 41)
    bad = client.post("/bases/up/uploads", files={"files": ("x.exe", exe, "a/b")})
    assert_error(bad, 422, "unsupported_file_type")
    licence = client.post("/bases/up/uploads", files={"files": ("GPL-3", b"GNU GPL v3\n", "a/b")})
    assert licence.status_code == 201, licence.text  # text of any name is taken (issue 41)


def test_local_paths_only_under_the_served_roots(
    client: httpx.Client, roots: Path, tmp_path: Path
) -> None:
    client.post("/bases", json={"name": "local"}).raise_for_status()
    inside = roots / "sub" / "inside.md"
    inside.parent.mkdir()
    inside.write_text("inside the served root\n", encoding="utf-8")
    outside = tmp_path / "outside.md"
    outside.write_text("outside\n", encoding="utf-8")
    escape = roots / "link.md"
    escape.symlink_to(outside)

    def add(path: str, kind: str = "file") -> httpx.Response:
        return client.post("/bases/local/items", json={"inputs": [{"type": kind, "path": path}]})

    r = add(str(inside))
    assert r.status_code == 201, r.text
    assert r.json()["items"][0]["origin"] == str(inside)
    assert add(str(roots / "sub"), "directory").status_code == 201
    for refused in (str(outside), str(escape), str(roots / ".." / "outside.md"), "/etc/passwd"):
        body = assert_error(add(refused), 422, "unsafe_path")
        assert body["details"]["reason"] == "outside_local_path_roots"
    assert_error(add("relative/inside.md"), 422, "invalid_input")
    assert_error(add("/bad\x00path"), 422, "invalid_input")
    assert_error(add(str(roots / "missing.md")), 422, "origin_missing")


def test_error_mapping(client: httpx.Client, kb) -> None:
    assert_error(client.get("/bases/nope"), 404, "not_found")
    assert_error(client.get("/bases/nope/search", params={"q": "x"}), 404, "not_found")
    assert_error(client.get("/jobs/nope"), 404, "not_found")
    assert_error(client.get("/no/such/route"), 404, "not_found")
    client.post("/bases", json={"name": "e"}).raise_for_status()
    assert_error(client.post("/bases", json={"name": " E "}), 409, "conflict")
    assert_error(client.post("/bases", json={"name": "x", "bogus": 1}), 422, "invalid_input")
    assert_error(
        client.post("/bases", json={"name": "x", "chunk_size": 10, "chunk_overlap": 10}),
        422,
        "invalid_input",
    )
    assert_error(
        client.post("/bases", content=b"{not json", headers={"content-type": "application/json"}),
        422,
        "invalid_input",
    )
    assert_error(client.get("/bases/e/search", params={"q": "!!!"}), 422, "no_searchable_tokens")
    assert_error(
        client.post("/bases/e/items", json={"inputs": [{"type": "url", "url": "ftp://x"}]}),
        422,
        "invalid_url",
    )
    assert_error(
        client.post("/bases/e/items", json={"inputs": [{"type": "note", "content": "  "}]}),
        422,
        "empty_content",
    )
    note = {"inputs": [{"type": "note", "content": "same note"}], "conflict": "detect"}
    assert client.post("/bases/e/items", json=note).status_code == 201
    body = assert_error(client.post("/bases/e/items", json=note), 409, "conflict")
    assert body["details"]["conflicts"][0]["title"] == "same note"
    r = client.request("PUT", "/bases")
    assert_error(r, 405, "method_not_allowed")
    assert set(r.headers["allow"].split(", ")) >= {"GET", "POST"}

    # An index that cannot be opened: 503 with the reason, and readiness says so.
    wait_until(lambda: client.get("/bases/e/items").json()[0]["status"] == "completed", 20)
    base = kb.get_base("e")
    kb.rt.close_store(base.id)
    index = kb.rt.storage(base.id).index_path
    for extra in index.parent.glob(index.name + "-*"):
        extra.unlink()
    index.write_bytes(b"this is not an sqlite database" * 100)
    body = assert_error(
        client.get("/bases/e/search", params={"q": "note"}), 503, "vector_store_unavailable"
    )
    assert body["message"]
    status = client.get("/status").json()
    index_status = next(
        c for c in status["components"] if c["component"] == "index" and c["base_id"] == base.id
    )
    assert index_status["status"] == "unavailable"
    assert status["status"] == "degraded"
    # The failed mount failed the base: further searches are refused until it is restored.
    assert_error(client.get("/bases/e/search", params={"q": "note"}), 409, "base_failed")


def test_search_over_several_bases_merges_on_one_scale(client: httpx.Client) -> None:
    """A hybrid base and a BM25-only base both score on the absolute scale (issue 29), so the
    merged list is ordered by score (``search/multi_base.py``)."""
    models = {"h": {"embedding_model_id": "hash:d16"}, "k": {}}
    for name, extra in models.items():
        client.post("/bases", json={"name": name, **extra}).raise_for_status()
        notes = [f"{name} note {n} about apples and pears {n}" for n in range(3)]
        inputs = [{"type": "note", "content": text} for text in notes]
        client.post(f"/bases/{name}/items", json={"inputs": inputs}).raise_for_status()
    wait_until(
        lambda: all(
            i["status"] == "completed" for n in "hk" for i in client.get(f"/bases/{n}/items").json()
        ),
        20,
    )
    r = client.post("/search", json={"bases": ["h", "k", "h"], "query": "apples", "top_k": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert {x["base_name"] for x in body["results"]} == {"h", "k"}
    assert [x["rank"] for x in body["results"]] == [1, 2, 3, 4]
    assert {x["score_kind"] for x in body["results"]} == {"hybrid", "keyword"}
    scores = [x["score"] for x in body["results"]]
    assert scores == sorted(scores, reverse=True)
    assert body["modes"] == {
        client.get("/bases/h").json()["id"]: "hybrid",
        client.get("/bases/k").json()["id"]: "bm25",
    }
    assert_error(
        client.post("/search", json={"bases": ["a", "zzz"], "query": "apples"}), 404, "not_found"
    )


def test_openapi_documents_the_error_shape_everywhere(client: httpx.Client) -> None:
    doc = client.get("/openapi.json").json()
    assert doc["components"]["schemas"]["ErrorBody"]["required"] == ["code", "message"]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for status in ("404", "409", "422", "503"):
                ref = op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/ErrorBody"), (method, path, status)


def test_model_ids_are_checked_before_anything_is_written(client: httpx.Client, kb) -> None:
    for body in (
        {"name": "m", "embedding_model_id": ""},  # was an IntegrityError (500)
        {"name": "m", "embedding_model_id": "hash"},
        {"name": "m", "embedding_model_id": "nope:x"},
        {"name": "m", "embedding_model_id": "hash:d99999999"},  # was 1.7 GB for one note
        {"name": "m", "embedding_model_id": "hash:d8?delay=600"},  # would park a job worker
        {"name": "m", "rerank_model_id": ""},
        {"name": "m", "rerank_model_id": "nope:x"},
    ):
        assert_error(client.post("/bases", json=body), 422, "invalid_input")
    assert kb.list_bases() == []
    assert not kb.settings.bases_dir.exists() or not any(kb.settings.bases_dir.iterdir())
    client.post("/bases", json={"name": "m", "rerank_model_id": "hash:r"}).raise_for_status()
    r = client.patch("/bases/m", json={"rerank_model_id": "nope:x"})
    assert_error(r, 422, "invalid_input")
    assert kb.get_base("m").rerank_model_id == "hash:r"
    r = client.post("/bases/m/enable-embedding", json={"embedding_model_id": "hash:d0"})
    assert_error(r, 422, "invalid_input")
    assert kb.get_base("m").embedding_model_id is None


def test_the_hash_provider_is_unknown_unless_enabled(tmp_path: Path, live_server) -> None:  # type: ignore[no-untyped-def]
    with Knowledge(load_settings(tmp_path / "plain", test_providers=False)) as kb:
        url = live_server(create_app(kb))
        r = httpx.post(url + "/bases", json={"name": "h", "embedding_model_id": "hash:d64"})
        body = assert_error(r, 422, "invalid_input")
        assert body["details"]["profile"] == "hash" and "hash" not in body["details"]["known"]
        assert kb.list_bases() == []


def test_a_long_upload_name_keeps_its_extension(client: httpx.Client, kb) -> None:
    client.post("/bases", json={"name": "long"}).raise_for_status()
    name = "n" * 297 + ".md"  # 300 bytes: was cut to 255 with the extension, then refused
    files = {"files": (name, b"# Long\n\nkept the markdown extension\n", "text/markdown")}
    r = client.post("/bases/long/uploads", files=files)
    assert r.status_code == 201, r.text
    rel = r.json()["items"][0]["data"]["relative_path"]
    assert rel.endswith(".md") and len(rel.encode()) == 255
    wait_until(lambda: client.get("/bases/long/items").json()[0]["status"] == "completed", 20)
    hit = client.get("/bases/long/search", params={"q": "markdown extension"}).json()["results"]
    assert hit and hit[0]["concept_id"] == rel


def test_url_adds_are_checked_for_syntax_at_the_request(client: httpx.Client, kb) -> None:
    client.post("/bases", json={"name": "web"}).raise_for_status()
    for url in ("http:///etc/passwd", "http://", "https://exa mple.com/", "http://a\x00b/", "x"):
        for kind in ("url", "sitemap"):
            r = client.post("/bases/web/items", json={"inputs": [{"type": kind, "url": url}]})
            assert_error(r, 422, "invalid_url")
    assert kb.list_items("web") == []
    # A host on a refused address is refused now too (issue 25: it used to be accepted and then
    # fail), with a hint naming the setting; the fetch checks again (DNS can change).
    r = client.post(
        "/bases/web/items", json={"inputs": [{"type": "url", "url": "http://127.0.0.1:9/x"}]}
    )
    body = assert_error(r, 422, "invalid_url")
    assert "allow_local_urls" in body["hint"]
    assert kb.list_items("web") == []
    # A spelling of a local host is refused as up front as the plain one (issue 37:
    # "localhost." was accepted with 201, then failed with error null).
    for url in (
        "http://localhost./",
        "http://127.1/",
        "http://0x7f000001/",
        "http://[::ffff:127.0.0.1]/",
    ):
        r = client.post("/bases/web/items", json={"inputs": [{"type": "url", "url": url}]})
        assert_error(r, 422, "invalid_url")
    assert kb.list_items("web") == []
