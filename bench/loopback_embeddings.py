"""A loopback OpenAI-compatible embeddings server with a fixed per-request latency.

Benchmarks point a provider profile at it so their figures measure our pipeline (queue,
batching, requests in flight, catalog and index writes), not this machine's CPU running a
model: every ``POST /v1/embeddings`` sleeps ``latency_s`` (one batch, whatever its size, like a
remote GPU server that is not saturated), then answers deterministic unit vectors, one per
input text, derived from the text's hash. Requests are served concurrently (one thread each).

    from loopback_embeddings import LoopbackEmbeddings

    with LoopbackEmbeddings(latency_s=0.2, dims=384) as server:
        (home / "config.toml").write_text(server.profile_toml("loop", batch_size=16))
        kb.create_base("b", embedding_model_id="loop:bench-embed")

Or standalone: ``python bench/loopback_embeddings.py --port 8089 --latency 0.2``, or in a
process of its own from a benchmark, so its JSON work does not compete with the pipeline under
test for the GIL (as a remote model would not): ``proc, url = spawn(0.2, dims=64)``.
Counters (``requests``, ``texts``, ``max_in_flight``) say how the client drove it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


def embed_text(text: str, dims: int) -> list[float]:
    """The server's vector for ``text``: unit length, the same on every call and process."""
    seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")
    vec = np.random.default_rng(seed).standard_normal(dims)
    return (vec / np.linalg.norm(vec)).astype(np.float32).tolist()


class LoopbackEmbeddings:
    """The server in a daemon thread on ``host``:``port`` (0: a free port); a context manager."""

    def __init__(
        self, *, latency_s: float = 0.2, dims: int = 384, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.latency_s = latency_s
        self.dims = dims
        self.requests = 0
        self.texts = 0
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def profile_toml(self, name: str, *, batch_size: int = 16, max_in_flight: int = 4) -> str:
        """A ``config.toml`` section naming this server as provider profile ``name``."""
        return (
            f"[providers.{name}]\n"
            f'base_url = "{self.base_url}"\n'
            f"batch_size = {batch_size}\n"
            f"max_in_flight = {max_in_flight}\n"
        )

    def start(self) -> LoopbackEmbeddings:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="loopback-embeddings", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> LoopbackEmbeddings:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset_counters(self) -> None:
        with self._lock:
            self.requests = self.texts = self.max_in_flight = 0

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            time.sleep(self.latency_s)
        finally:
            with self._lock:
                self._in_flight -= 1
                self.requests += 1
                self.texts += len(texts)
        dims = int(body.get("dimensions") or self.dims)
        return {
            "object": "list",
            "model": body.get("model", ""),
            "data": [
                {"object": "embedding", "index": i, "embedding": embed_text(str(t), dims)}
                for i, t in enumerate(texts)
            ],
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers and httpx use it

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._send(200, {"object": "loopback-embeddings", "dims": server.dims})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/embeddings":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                self._send(200, server._answer(body))

            def log_message(self, *args: object) -> None:  # quiet
                pass

        return Handler


def spawn(latency_s: float, *, dims: int = 384) -> tuple[subprocess.Popen[str], str]:
    """Start the server in a child process on a free port; return it and its ``base_url``
    (``http://127.0.0.1:N/v1``). The caller terminates the process."""
    cmd = [sys.executable, __file__, "--port", "0", "--latency", str(latency_s)]
    proc = subprocess.Popen([*cmd, "--dims", str(dims)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "serving http://127.0.0.1:N/v1/embeddings (...)"
    return proc, line.split()[1].removesuffix("/embeddings")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8089)
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per request")
    ap.add_argument("--dims", type=int, default=384)
    args = ap.parse_args()
    server = LoopbackEmbeddings(
        latency_s=args.latency, dims=args.dims, host=args.host, port=args.port
    )
    print(f"serving {server.base_url}/embeddings ({args.latency:g} s per request)", flush=True)
    server._httpd.serve_forever()


if __name__ == "__main__":
    main()
