"""A loopback OpenAI-compatible embedding server with a fixed latency, in its own process.

    python bench/_loopback.py --latency 0.2 --dims 64     # prints the port, serves until killed

``POST /v1/embeddings`` answers ``{"data": [{"index", "embedding"}]}`` with deterministic hash
vectors after ``latency`` seconds per request, however many requests are in flight. It runs in
a separate process so its JSON work does not compete with the pipeline under test for the GIL,
as a remote model would not. :func:`start` spawns it and returns ``(process, base_url)``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class SlowEmbeddings(BaseHTTPRequestHandler):
    latency_s = 0.2
    dims = 64
    protocol_version = "HTTP/1.1"  # keep-alive: the client's pool reuses connections

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        from knowbase.providers.hashing_provider import hash_vector

        started = time.monotonic()
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = [
            {"index": i, "embedding": hash_vector(t, self.dims).tolist()}
            for i, t in enumerate(body["input"])
        ]
        out = json.dumps({"data": data}).encode()
        time.sleep(max(0.0, self.latency_s - (time.monotonic() - started)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: object) -> None:
        pass


def start(latency_s: float, dims: int = 64) -> tuple[subprocess.Popen[str], str]:
    """Spawn the server; return the process and its ``base_url`` (``http://127.0.0.1:N/v1``)."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--latency", str(latency_s), "--dims", str(dims)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}/v1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--dims", type=int, default=64)
    args = parser.parse_args()
    SlowEmbeddings.latency_s, SlowEmbeddings.dims = args.latency, args.dims
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowEmbeddings)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
