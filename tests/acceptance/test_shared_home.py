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
