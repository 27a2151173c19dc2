"""One home, one server, many CLI processes: no acknowledged write is lost (issue 37).

The reproduction from the issue: ``kb serve`` answers ``/status`` polls while ``kb add`` runs in
other processes. On the code before the fix, the ``/status`` poll read the catalog's header
with ``open()`` and closed it inside the server: on POSIX that drops every lock the server's
SQLite connections hold on the file, the next CLI process believed it was the last connection,
checkpointed and deleted the WAL and shared memory under the server, and every write the server
acknowledged afterwards went into a deleted file (lost at restart).

These tests run real processes on a real home and look at ``/proc/PID/fd`` (Linux only).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from _serve import Served, kb_serve_process

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc"),
]


def kb(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KNOWBASE_HOME": str(home), "KNOWBASE_TEST_PROVIDERS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def deleted_files(pid: int, home: Path) -> list[str]:
    """Files of ``home`` that process ``pid`` holds open although they were deleted."""
    held = []
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.endswith(" (deleted)") and target.startswith(str(home)):
            held.append(target)
    return held


def note_ids(served: Served, base: str) -> set[str]:
    items = httpx.get(f"{served.url}/bases/{base}/items", timeout=30)
    assert items.status_code == 200, items.text
    return {i["id"] for i in items.json()}


def test_a_server_keeps_its_writes_while_cli_processes_write_and_status_is_polled(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    assert kb(home, "base", "create", "notes").returncode == 0
    acknowledged: list[str] = []
    with kb_serve_process(home, "--no-workers") as served:
        for n in range(4):
            status = httpx.get(f"{served.url}/status", timeout=30)
            assert status.status_code == 200, status.text
            assert status.json()["status"] != "unavailable", status.text
            added = kb(home, "add", "notes", "--no-wait", "--note", f"from the cli {n} zyx{n}")
            assert added.returncode == 0, added.stderr
            status = httpx.get(f"{served.url}/status", timeout=30)
            assert status.status_code == 200, status.text
            reply = httpx.post(
                f"{served.url}/bases/notes/items",
                json={"inputs": [{"type": "note", "content": f"from the server {n} qwv{n}"}]},
                headers={"Origin": served.url},
                timeout=30,
            )
            assert reply.status_code == 201, reply.text
            acknowledged += [i["id"] for i in reply.json()["items"]]
            assert deleted_files(served.proc.pid, home) == []
        assert set(acknowledged) <= note_ids(served, "notes")
        assert "Traceback" not in served.output()
    # A restart: every write the server acknowledged is still there.
    with kb_serve_process(home, "--no-workers") as served:
        assert set(acknowledged) <= note_ids(served, "notes")
    check = kb(home, "status", "notes")
    assert check.returncode == 0, check.stderr


# --- the whole surface, while a second process writes ------------------------------------------
def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(home: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KNOWBASE_HOME": str(home), "KNOWBASE_TEST_PROVIDERS": "1"}
    cmd = [sys.executable, "-m", "knowbase.interfaces.cli", *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _get_routes(served: Served, base: str, item_id: str, job_id: str) -> list[str]:
    """Every GET route of ``/openapi.json`` with its path filled in, plus the console pages."""
    spec = httpx.get(f"{served.url}/openapi.json", timeout=30).json()
    fill = {"{base}": base, "{item_id}": item_id, "{job_id}": job_id}
    urls = []
    for path, ops in spec["paths"].items():
        if "get" not in ops or path.endswith("/events"):  # a stream: read below, bounded
            continue
        for key, value in fill.items():
            path = path.replace(key, value)
        urls.append(path)
    urls += ["/", f"/console/bases/{base}", "/console/search?q=otters&base=" + base, "/docs"]
    urls += [f"/bases/{base}/search?q=otters", f"/bases/{base}/concepts/read?concept_id=x.md"]
    return urls


def _mcp_calls(url: str) -> None:
    import anyio
    from mcp import Client

    async def story() -> None:
        async with Client(url) as c:
            await c.call_tool("kb_list", {})
            await c.call_tool("kb_list", {"baseId": "docs"})
            await c.call_tool("kb_tree", {"baseId": "docs"})
            await c.call_tool("kb_search", {"query": "otters", "baseIds": ["docs"]})
            await c.call_tool("kb_grep", {"baseId": "docs", "conceptId": "x.md", "pattern": "o"})
            await c.call_tool("kb_read", {"baseId": "docs", "conceptId": "x.md"})

    anyio.run(story)


class Writer:
    """A second process writing notes in a loop (``kb add --no-wait``) until stopped."""

    def __init__(self, home: Path) -> None:
        import threading

        self.home = home
        self.codes: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            done = kb(self.home, "add", "notes", "--no-wait", "--note", f"written {n} uvw{n}")
            self.codes.append(done.returncode)
            n += 1

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)
        assert self.codes and set(self.codes) == {0}, self.codes


def _retrying(call: object, seconds: float = 30) -> None:
    import time

    deadline = time.monotonic() + seconds
    while True:
        try:
            call()  # type: ignore[operator]
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_no_surface_drops_a_lock_while_another_process_writes(tmp_path: Path) -> None:
    """Issue 37's rule as a test. Each surface runs beside one writing process and nothing
    else: a surface that drops its own locks then lets the writer, finishing last, delete the
    WAL under it, and it holds a deleted file of the home (any third process holding a lock
    would hide that). The HTTP routes and console pages with the CLI's read commands, then the
    MCP tools, then a worker."""
    import time

    home = tmp_path / "home"
    for args in (
        ("base", "create", "docs", "--embedding", "hash:d64"),
        ("base", "create", "notes"),
    ):
        assert kb(home, *args).returncode == 0
    folder = tmp_path / "src"
    folder.mkdir()
    for n in range(6):
        (folder / f"doc{n}.md").write_text(f"# Doc {n}\n\notters and beavers {n}\n")
    assert kb(home, "add", "docs", str(folder)).returncode == 0

    with kb_serve_process(home) as served, Writer(home):
        items = httpx.get(f"{served.url}/bases/docs/items", timeout=30).json()
        jobs = httpx.get(f"{served.url}/jobs", timeout=30).json()
        routes = _get_routes(served, "docs", items[0]["id"], jobs[0]["id"])
        for _ in range(2):
            for route in routes:
                answer = httpx.get(served.url + route, timeout=60)
                assert answer.status_code < 500, (route, answer.text)
            time.sleep(0.5)  # let a writer finish after the last poll
        with httpx.stream("GET", f"{served.url}/bases/docs/events", timeout=5) as events:
            assert events.status_code == 200
        for args in (
            ("status",),
            ("status", "docs"),
            ("search", "docs", "otters"),
            ("tree", "docs"),
            ("jobs",),
            ("base", "list"),
            ("base", "show", "docs"),
            ("export", "docs", str(tmp_path / "docs.kbz")),
        ):
            done = kb(home, *args)
            assert done.returncode == 0, (args, done.stderr)
        time.sleep(2)
        assert deleted_files(served.proc.pid, home) == []
        assert "Traceback" not in served.output()

    port = _free_port()
    mcp = _start(home, "mcp", "--http", "--port", str(port), "--base", "docs")
    try:
        with Writer(home):
            for _ in range(3):
                _retrying(lambda: _mcp_calls(f"http://127.0.0.1:{port}/mcp"))
                time.sleep(1)
            assert deleted_files(mcp.pid, home) == []
    finally:
        mcp.terminate()
        mcp.wait(30)

    worker = _start(home, "worker")
    try:
        with Writer(home):
            time.sleep(8)  # the worker indexes the writer's notes meanwhile
            assert deleted_files(worker.pid, home) == []
    finally:
        worker.terminate()
        worker.wait(30)
