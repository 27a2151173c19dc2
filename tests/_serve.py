"""A real ``kb serve`` subprocess on a free loopback port, for tests that speak HTTP to it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def kb_serve(home: Path, *extra: str, token: str | None = None) -> Iterator[str]:
    """Start ``kb serve`` (hash: providers enabled) and yield its URL once ``/`` answers 200;
    SIGTERM on the way out."""
    with kb_serve_process(home, *extra, token=token) as served:
        yield served.url


@dataclass
class Served:
    """A running ``kb serve``: its URL, its process and the file its output goes to (a file,
    not a pipe: a server that logs more than a pipe holds would block on a full pipe)."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def kb_serve_process(home: Path, *extra: str, token: str | None = None) -> Iterator[Served]:
    """:func:`kb_serve`, yielding the server process and its output file too."""
    port = free_port()
    # hash: embeddings exist only when test providers are enabled (the suite enables them)
    env = {**os.environ, "KNOWBASE_HOME": str(home), "KNOWBASE_TEST_PROVIDERS": "1"}
    env.pop("KNOWBASE_API_TOKEN", None)
    if token:
        env["KNOWBASE_API_TOKEN"] = token
    cmd = [sys.executable, "-m", "knowbase.interfaces.cli", "serve", "--port", str(port), *extra]
    fd, name = tempfile.mkstemp(prefix="kb-serve-", suffix=".log")
    log = Path(name)
    with os.fdopen(fd, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    served = Served(f"http://127.0.0.1:{port}", proc, log)
    url = served.url
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, served.output()
            try:
                if httpx.get(url + "/", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "kb serve did not start"
            time.sleep(0.2)
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.unlink(missing_ok=True)
