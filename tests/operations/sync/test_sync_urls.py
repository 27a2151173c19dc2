"""URL refresh on ``kb sync``: conditional GET against a real loopback server (issue 15 item 3)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from knowbase.operations.add.inputs import AddInput
from knowbase.pipeline.sources import ratelimit
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def roomy_limiter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh fetch limiter per test with room for every fetch of these syncs: the real one
    (10 a minute, tested in tests/pipeline/sources) would make a later fetch wait out 60 s."""
    monkeypatch.setattr(ratelimit, "_default", ratelimit.FetchLimiter(per_minute=1000))


class Site:
    def __init__(self) -> None:
        self.body = "<html><head><title>Zoo</title></head><body><p>penguins</p></body></html>"
        self.version = 1
        self.status: list[int] = []


@pytest.fixture
def site() -> Iterator[tuple[Site, str]]:
    state = Site()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            etag = f'"v{state.version}"'
            if self.headers.get("If-None-Match") == etag:
                state.status.append(304)
                self.send_response(304)
                self.send_header("ETag", etag)
                self.end_headers()
                return
            data = state.body.encode()
            state.status.append(200)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("ETag", etag)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/zoo"
    finally:
        server.shutdown()
        server.server_close()


def test_pages_refresh_with_conditional_get_and_reindex_only_on_change(
    kb: Knowledge, site: tuple[Site, str]
) -> None:
    state, url = site
    base = kb.create_base(
        "web", embedding_model_id="hash:d16", file_processor_id=None, allow_local_urls=True
    )
    item = kb.add(base.id, [AddInput.web(url)], wait=True).items[0]
    concept = kb.get_item(base.id, item.id).concept_id
    assert concept
    assert kb.sync(base.id, wait=True).refresh == []  # no url_max_age: pages never re-fetched
    kb.update_base(base.id, url_max_age=0)
    first = kb.sync(base.id, wait=True)  # no validators yet: a 200 whose body is the same
    assert first.urls == {item.id: "same"}
    assert kb.get_item(base.id, item.id).data["etag"] == '"v1"'
    second = kb.sync(base.id, wait=True)
    assert second.urls == {item.id: "not_modified"}
    assert state.status[-1] == 304
    state.body = state.body.replace("penguins", "puffins")
    state.version = 2
    third = kb.sync(base.id, wait=True)
    assert third.urls == {item.id: "changed"}
    after = kb.get_item(base.id, item.id)
    assert after.status == "completed" and after.concept_id == concept
    assert any("puffins" in h.text for h in kb.search(base.id, "puffins").results)
    assert not any("penguins" in h.text for h in kb.search(base.id, "penguins").results)
    assert state.status.count(304) == 1
    assert len([i for i in kb.list_items(base.id) if i.type == "url"]) == 1


@pytest.fixture
def mapsite() -> Iterator[tuple[dict[str, str], str]]:
    """A loopback site whose pages and sitemap.xml the test edits between syncs."""
    pages = {
        "/a": "<html><head><title>A</title></head><body><p>albatross</p></body></html>",
        "/b": "<html><head><title>B</title></head><body><p>bittern</p></body></html>",
    }
    box: dict[str, int] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/sitemap.xml":
                base = f"http://127.0.0.1:{box['port']}"
                locs = "".join(f"<url><loc>{base}{p}</loc></url>" for p in sorted(pages))
                data = f'<?xml version="1.0"?><urlset>{locs}</urlset>'.encode()
                kind = "application/xml"
            elif self.path in pages:
                data, kind = pages[self.path].encode(), "text/html; charset=utf-8"
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    box["port"] = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield pages, f"http://127.0.0.1:{box['port']}/sitemap.xml"
    finally:
        server.shutdown()
        server.server_close()


def _pages(kb: Knowledge, base_id: str) -> dict[str, str]:
    return {str(i.origin): i.status for i in kb.list_items(base_id) if i.type == "url"}


def test_sync_rereads_a_sitemap_adds_new_pages_and_prunes_only_when_asked(
    kb: Knowledge, mapsite: tuple[dict[str, str], str]
) -> None:
    pages, url = mapsite
    root = url.rsplit("/", 1)[0]
    base = kb.create_base(
        "maps", embedding_model_id="hash:d16", file_processor_id=None, allow_local_urls=True
    )
    kb.add(base.id, [AddInput.web(url)], wait=True)
    assert set(_pages(kb, base.id)) == {f"{root}/a", f"{root}/b"}
    kb.update_base(base.id, url_max_age=0)
    pages["/c"] = "<html><head><title>C</title></head><body><p>cormorant</p></body></html>"
    del pages["/b"]
    report = kb.sync(base.id, wait=True)
    sitemap = next(r for r in report.refresh if r["kind"] == "sitemap")
    assert report.urls[sitemap["item_id"]] == "1 added, 1 no longer listed"
    held = _pages(kb, base.id)
    assert held[f"{root}/c"] == "completed"
    assert f"{root}/b" in held  # dropped from the sitemap, kept without --prune
    assert any("cormorant" in h.text for h in kb.search(base.id, "cormorant").results)
    # a page the user deletes is not re-added by the sitemap that still lists it
    a = next(i for i in kb.list_items(base.id) if i.origin == f"{root}/a")
    kb.delete_items(base.id, [a.id], wait=True)
    again = kb.sync(base.id, prune=True, wait=True)
    assert again.urls[sitemap["item_id"]] == "0 added, 1 no longer listed"
    assert set(_pages(kb, base.id)) == {f"{root}/c"}  # b pruned, a stays deleted
    roots = kb.list_items(base.id, roots_only=True)
    assert [r.status for r in roots] == ["completed"]
