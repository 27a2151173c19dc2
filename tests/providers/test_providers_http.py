"""OpenAI-compatible embeddings and /rerank against a real loopback HTTP server."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from knowbase.errors import EmbeddingMismatch, ProviderError, ProviderUnavailable
from knowbase.providers.base import RerankResult
from knowbase.providers.openai_http import OpenAIEmbeddings
from knowbase.providers.registry import (
    clear_cache,
    get_embedding_provider,
    get_rerank_provider,
    probe_dims,
)
from knowbase.providers.rerank_http import HttpReranker
from knowbase.settings import ProviderProfile, Settings

Reply = tuple[int, Any]  # (status, JSON body or raw bytes)


def text_vector(text: str, width: int = 3) -> list[float]:
    """What the fake server embeds a text as: recognisable per text, same width for all."""
    return [float(len(text)), float(sum(map(ord, text)) % 97), *([1.0] * (width - 2))]


def openai_reply(body: dict[str, Any]) -> Reply:
    """A correct OpenAI answer, in REVERSED order so the client has to sort by index."""
    data = [
        {"object": "embedding", "index": i, "embedding": text_vector(t)}
        for i, t in enumerate(body["input"])
    ]
    return 200, {"object": "list", "data": data[::-1], "model": body["model"]}


class FakeServer:
    """A ThreadingHTTPServer whose answer is ``reply(path, body)``; it records every request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reply: Callable[[str, dict[str, Any]], Reply] = lambda path, body: openai_reply(body)
        self.release = threading.Event()  # a "hang" reply waits on this until teardown
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                body = json.loads(raw)
                server.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                status, answer = server.reply(self.path, body)
                if status == 0:  # hang: never answer while the client waits
                    server.release.wait(10)
                    return
                payload = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                if status == 429:
                    self.send_header("retry-after", "7")
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def profile(self, name: str = "test", api_key_env: str | None = None) -> ProviderProfile:
        return ProviderProfile(name, self.base_url + "/", api_key_env)


@pytest.fixture(scope="module")
def running_server() -> Iterator[FakeServer]:
    # One server per module: shutdown() waits up to a poll interval, per test that adds up.
    fake = FakeServer()
    fake.thread.start()
    yield fake
    fake.release.set()
    fake.httpd.shutdown()
    fake.httpd.server_close()


@pytest.fixture
def server(running_server: FakeServer) -> Iterator[FakeServer]:
    running_server.requests.clear()
    running_server.reply = lambda path, body: openai_reply(body)
    running_server.release.clear()
    yield running_server
    running_server.release.set()  # frees a handler left hanging by a timeout test


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as c:
        yield c


def embedder(server: FakeServer, client: httpx.Client, **kwargs: Any) -> OpenAIEmbeddings:
    return OpenAIEmbeddings(server.profile(), "emb-model", client=client, **kwargs)


# --- embeddings: happy path --------------------------------------------------------------------
def test_batches_and_restores_input_order(server: FakeServer, client: httpx.Client) -> None:
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    provider = embedder(server, client, batch_size=2)
    vectors = provider.embed(texts)
    assert vectors.dtype == np.float32
    np.testing.assert_array_equal(vectors, np.array([text_vector(t) for t in texts], np.float32))
    assert [r["body"]["input"] for r in server.requests] == [
        ["a", "bb"],
        ["ccc", "dddd"],
        ["eeeee"],
    ]
    assert {r["path"] for r in server.requests} == {"/v1/embeddings"}
    assert all(r["body"]["model"] == "emb-model" for r in server.requests)
    assert all("dimensions" not in r["body"] for r in server.requests)
    assert provider.dims == 3  # learned from the first answer
    assert provider.model_id == "test:emb-model"
    assert provider.count_tokens("anything") is None
    assert provider.scripts is None and provider.window is None


def test_empty_input_makes_no_request(server: FakeServer, client: httpx.Client) -> None:
    assert embedder(server, client).embed([]).shape[0] == 0
    assert server.requests == []


def test_dims_given_are_sent_and_enforced(server: FakeServer, client: httpx.Client) -> None:
    provider = embedder(server, client, dims=3, window=512)
    provider.embed(["x"])
    assert server.requests[0]["body"]["dimensions"] == 3
    assert provider.window == 512
    with pytest.raises(EmbeddingMismatch):
        embedder(server, client, dims=4).embed(["x"])


def test_bearer_key_comes_from_the_profile_env(
    server: FakeServer, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_TEST_EMBED_KEY", "sekrit")
    OpenAIEmbeddings(server.profile(api_key_env="KB_TEST_EMBED_KEY"), "m", client=client).embed(
        ["x"]
    )
    monkeypatch.delenv("KB_TEST_EMBED_KEY")
    OpenAIEmbeddings(server.profile(api_key_env="KB_TEST_EMBED_KEY"), "m", client=client).embed(
        ["x"]
    )
    first, second = (r["headers"] for r in server.requests)
    assert first["Authorization"] == "Bearer sekrit"
    assert "Authorization" not in second


# --- embeddings: wrong answers -----------------------------------------------------------------
def test_wrong_count_is_a_mismatch(server: FakeServer, client: httpx.Client) -> None:
    server.reply = lambda path, body: (200, {"data": openai_reply(body)[1]["data"][1:]})
    with pytest.raises(EmbeddingMismatch) as info:
        embedder(server, client).embed(["a", "b", "c"])
    assert info.value.details["expected"] == 3 and info.value.details["got"] == 2


def test_uneven_width_is_a_mismatch(server: FakeServer, client: httpx.Client) -> None:
    def reply(path: str, body: dict[str, Any]) -> Reply:
        status, answer = openai_reply(body)
        answer["data"][0]["embedding"] = [1.0, 2.0]
        return status, answer

    server.reply = reply
    with pytest.raises(EmbeddingMismatch):
        embedder(server, client).embed(["a", "b"])


def test_width_change_between_calls_is_a_mismatch(server: FakeServer, client: httpx.Client) -> None:
    provider = embedder(server, client)
    provider.embed(["a"])
    server.reply = lambda path, body: (200, {"data": [{"index": 0, "embedding": [1.0] * 5}]})
    with pytest.raises(EmbeddingMismatch):
        provider.embed(["a"])


def test_empty_vector_is_a_mismatch(server: FakeServer, client: httpx.Client) -> None:
    server.reply = lambda path, body: (200, {"data": [{"index": 0, "embedding": []}]})
    with pytest.raises(EmbeddingMismatch, match="empty"):
        embedder(server, client).embed(["a"])


def test_repeated_index_is_a_mismatch(server: FakeServer, client: httpx.Client) -> None:
    server.reply = lambda path, body: (
        200,
        {"data": [{"index": 0, "embedding": [1.0, 2.0]}, {"index": 0, "embedding": [1.0, 2.0]}]},
    )
    with pytest.raises(EmbeddingMismatch, match="index"):
        embedder(server, client).embed(["a", "b"])


def test_non_json_answer_is_a_provider_error(server: FakeServer, client: httpx.Client) -> None:
    server.reply = lambda path, body: (200, b"<html>proxy login</html>")
    with pytest.raises(ProviderError) as info:
        embedder(server, client).embed(["a"])
    assert not isinstance(info.value, EmbeddingMismatch)


# --- embeddings: transport and status errors ---------------------------------------------------
@pytest.mark.parametrize("status", [500, 503, 429])
def test_server_errors_and_rate_limits_are_unavailable(
    server: FakeServer, client: httpx.Client, status: int
) -> None:
    server.reply = lambda path, body: (status, {"error": {"message": "overloaded"}})
    with pytest.raises(ProviderUnavailable, match="overloaded") as info:
        embedder(server, client).embed(["a"])
    assert info.value.details["status"] == status
    assert info.value.details["retry_after"] == ("7" if status == 429 else None)


@pytest.mark.parametrize(
    "answer",
    [{"error": {"message": "model 'nope' not found"}}, {"error": "model 'nope' not found"}],
)
def test_client_errors_carry_the_server_message(
    server: FakeServer, client: httpx.Client, answer: dict[str, Any]
) -> None:
    server.reply = lambda path, body: (400, answer)
    with pytest.raises(ProviderError, match="model 'nope' not found") as info:
        embedder(server, client).embed(["a"])
    assert not isinstance(info.value, ProviderUnavailable)
    assert info.value.details["status"] == 400
    assert info.value.to_dict()["code"] == "provider_error"


def test_unauthorized_hints_at_the_key_env(server: FakeServer, client: httpx.Client) -> None:
    server.reply = lambda path, body: (401, {"detail": "bad key"})
    with pytest.raises(ProviderError, match="bad key") as info:
        embedder(server, client).embed(["a"])
    assert "api_key_env" in (info.value.hint or "")


def test_connection_refused_is_unavailable(client: httpx.Client) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    profile = ProviderProfile("down", f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ProviderUnavailable, match="cannot reach") as info:
        OpenAIEmbeddings(profile, "m", client=client).embed(["a"])
    assert info.value.details["status"] is None


def test_timeout_is_unavailable(server: FakeServer) -> None:
    server.reply = lambda path, body: (0, None)
    provider = OpenAIEmbeddings(server.profile(), "m", timeout=0.3)
    try:
        with pytest.raises(ProviderUnavailable, match="in time"):
            provider.embed(["a"])
    finally:
        provider.close()


# --- rerank ------------------------------------------------------------------------------------
def test_rerank_sorts_and_drops_invalid_entries(server: FakeServer, client: httpx.Client) -> None:
    results = [
        {"index": 0, "relevance_score": 0.2},
        {"index": 2, "relevance_score": 0.9},
        {"index": 9, "relevance_score": 1.0},  # not a document
        {"index": -1, "relevance_score": 1.0},
        {"index": 2, "relevance_score": 0.5},  # repeated
        {"index": 1, "relevance_score": "high"},  # not a number
        {"index": 3, "relevance_score": 0.0},  # a zero score is kept
    ]
    server.reply = lambda path, body: (200, {"model": body["model"], "results": results})
    reranker = HttpReranker(server.profile(), "rr-model", client=client)
    got = reranker.rerank("q", ["d0", "d1", "d2", "d3"], top_n=6)
    assert got == [RerankResult(2, 0.9), RerankResult(0, 0.2), RerankResult(3, 0.0)]
    request = server.requests[0]
    assert request["path"] == "/v1/rerank"
    assert request["body"] == {
        "model": "rr-model",
        "query": "q",
        "documents": ["d0", "d1", "d2", "d3"],
        "top_n": 4,
    }
    assert reranker.model_id == "test:rr-model"


def test_rerank_accepts_a_bare_list_with_score_and_trims(
    server: FakeServer, client: httpx.Client
) -> None:
    server.reply = lambda path, body: (
        200,
        [{"index": 0, "score": 0.1}, {"index": 1, "score": 0.7}, {"index": 2, "score": 0.4}],
    )
    got = HttpReranker(server.profile(), "tei", client=client).rerank("q", ["a", "b", "c"], 2)
    assert got == [RerankResult(1, 0.7), RerankResult(2, 0.4)]


def test_rerank_without_documents_asks_nothing(server: FakeServer, client: httpx.Client) -> None:
    assert HttpReranker(server.profile(), "m", client=client).rerank("q", [], 6) == []
    assert server.requests == []


@pytest.mark.parametrize(("status", "error"), [(503, ProviderUnavailable), (404, ProviderError)])
def test_rerank_errors_are_mapped(
    server: FakeServer, client: httpx.Client, status: int, error: type[Exception]
) -> None:
    server.reply = lambda path, body: (status, {"message": "no such reranker"})
    with pytest.raises(error, match="no such reranker"):
        HttpReranker(server.profile(), "m", client=client).rerank("q", ["a"], 1)


def test_rerank_answer_without_results_is_a_provider_error(
    server: FakeServer, client: httpx.Client
) -> None:
    server.reply = lambda path, body: (200, {"object": "list"})
    with pytest.raises(ProviderError, match="test:m"):
        HttpReranker(server.profile(), "m", client=client).rerank("q", ["a"], 1)


# --- through the registry ----------------------------------------------------------------------
def test_registry_builds_http_providers_from_profiles(server: FakeServer, tmp_path: Path) -> None:
    clear_cache()
    settings = Settings(home=tmp_path, providers={"test": server.profile()})
    try:
        provider = get_embedding_provider("test:emb:latest", settings)
        assert isinstance(provider, OpenAIEmbeddings) and provider.model == "emb:latest"
        assert probe_dims(provider) == 3
        assert server.requests[0]["body"]["input"] == ["dimension probe"]
        assert probe_dims(provider) == 3 and len(server.requests) == 1  # learned, not re-probed
        assert get_embedding_provider("test:emb:latest", settings) is provider
        server.reply = lambda path, body: (200, {"results": [{"index": 0, "relevance_score": 1}]})
        reranker = get_rerank_provider("test:rr", settings)
        assert reranker.rerank("q", ["a"], 1) == [RerankResult(0, 1.0)]
    finally:
        clear_cache()
