"""URL refresh on ``kb sync``: conditional GET against a real loopback server (issue 15 item 3)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from knowbase.ingestion.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


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
