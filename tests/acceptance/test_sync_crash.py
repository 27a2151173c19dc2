"""``kill -9`` during ``kb sync`` (a real CLI process): the next process recovers it like any
import, and one more sync leaves every file current — no duplicates, no orphan units."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from knowbase.catalog.schema import ACTIVE_STATUSES
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import Settings

pytestmark = pytest.mark.timeout(240)
# Index jobs run in batches of up to 64 documents, a few batches at a time: enough files that
# some batches have finished while others are mid-way when the process is killed.
FILES = 300


def test_kill_9_mid_sync_recovers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    root = tmp_path / "docs"
    root.mkdir()
    for n in range(FILES):
        (root / f"f{n}.md").write_text(f"file {n} about old owls", encoding="utf-8")
    kb = Knowledge(Settings(home=home, test_providers=True))
    base = kb.create_base(
        "b", embedding_model_id="hash:d16?delay=0.4", file_processor_id=None, document_count=1000
    )
    kb.add(base.id, [AddInput.directory(root)], wait=True, timeout_s=180)
    for n in range(FILES):
        (root / f"f{n}.md").write_text(f"file {n} about new newts, longer", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNOWBASE_")}
    env["KNOWBASE_TEST_PROVIDERS"] = "1"
    cmd = "from knowbase.interfaces.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", cmd, "sync", "b", "--home", str(home), "--json"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:  # kill once part of the tree is done and part is still running
        done = [i for i in kb.list_items(base.id) if i.type == "file" and i.status == "completed"]
        busy = [i for i in kb.list_items(base.id) if i.status in ("reading", "embedding")]
        if busy and "newts" in "".join(h.text for h in kb.search(base.id, "newts").results):
            break
        assert time.monotonic() < deadline and proc.poll() is None, (len(done), len(busy))
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    kb.close()

    kb = Knowledge(Settings(home=home, test_providers=True))
    try:
        kb.start_workers()  # boot recovery: the dead process's jobs and items settle
        end = time.monotonic() + 60
        while any(i.status in ACTIVE_STATUSES for i in kb.list_items(base.id)):
            assert time.monotonic() < end
            time.sleep(0.1)
        kb.stop_workers()
        report = kb.sync(base.id, wait=True, timeout_s=100)
        assert report.failed == []
        files = [i for i in kb.list_items(base.id) if i.type == "file"]
        assert len(files) == FILES and len({i.origin for i in files}) == FILES
        assert all(i.status == "completed" for i in files)
        assert kb.search(base.id, "newts").results  # found, and every file holds its new text
        for item in files:
            assert "newts" in "".join(c.text for c in kb.list_item_chunks(base.id, item.id))
        assert not any("owls" in h.text for h in kb.search(base.id, "owls").results)
        store = kb.rt.store(kb.get_base(base.id))
        assert store.unit_material_ids() <= {i.id for i in files}
        assert kb.sync(base.id, wait=True).job_id is None
    finally:
        kb.close()


GROUP = 50


def _file(root: Path, n: int) -> Path:
    """File ``n`` in a folder of ``GROUP`` files (searched one folder at a time)."""
    folder = root / f"g{n // GROUP}"
    folder.mkdir(exist_ok=True)
    return folder / f"f{n}.md"


def _kb(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNOWBASE_")}
    env["KNOWBASE_TEST_PROVIDERS"] = "1"
    cmd = [sys.executable, "-m", "knowbase.interfaces.cli", *args, "--home", str(home)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_a_second_kb_sync_after_kill_9_resumes_and_a_busy_base_fails_loudly(
    tmp_path: Path,
) -> None:
    """Issue 26 item 5: after a kill -9 of ``kb sync`` the changed documents stay searchable
    (old or new version) and a second ``kb sync`` finishes the work (it used to print "busy"
    and exit 0, leaving them unsearchable); while another live process runs the base's jobs,
    ``kb sync`` exits non-zero with ``base_busy``."""
    home = tmp_path / "home"
    home.mkdir()
    root = tmp_path / "docs"
    root.mkdir()
    for n in range(FILES):
        _file(root, n).write_text(f"file {n} about marmots and old owls", encoding="utf-8")
    kb = Knowledge(Settings(home=home, test_providers=True))
    base = kb.create_base(
        "b", embedding_model_id="hash:d16?delay=0.4", file_processor_id=None, document_count=1000
    )
    kb.add(base.id, [AddInput.directory(root)], wait=True, timeout_s=180)
    files = {i.id for i in kb.list_items(base.id) if i.type == "file"}
    for n in range(FILES):
        _file(root, n).write_text(f"file {n} about marmots and new newts", encoding="utf-8")
    (root / "extra.md").write_text("an extra file about marmots", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNOWBASE_")}
    env["KNOWBASE_TEST_PROVIDERS"] = "1"
    proc = subprocess.Popen(
        [sys.executable, "-m", "knowbase.interfaces.cli", "sync", "b", "--home", str(home)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:  # kill once part of the reindex is done and part is still running
        items = kb.list_items(base.id)
        done = [i for i in items if i.id in files and i.status == "completed"]
        busy = [i for i in items if i.status in ("reading", "embedding")]
        if busy and 0 < len(done) < FILES:
            break
        assert time.monotonic() < deadline and proc.poll() is None, (len(done), len(busy))
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    # Every changed document is still found, in its old or its new version.
    # (a search returns at most 200 candidates per lane: one search per folder of 50)
    found = {
        h.item_id
        for g in range(FILES // GROUP)
        for h in kb.search(base.id, "marmots", top_k=1000, under=f"docs/g{g}").results
    }
    assert found >= files
    kb.close()

    # A live process runs the base's jobs (a worker; a long note keeps it busy ~15 s): the
    # base is genuinely busy.
    from test_crash_recovery import WorkerProcess

    kb = Knowledge(Settings(home=home, test_providers=True))
    words = "about marmots and their burrows in the hills " * 4
    text = "\n\n".join(f"Paragraph {i} {words}" for i in range(4500))
    note = kb.add(base.id, [AddInput.note(text)]).items[0]
    worker = WorkerProcess(home, tmp_path / "worker.log")
    try:
        deadline = time.monotonic() + 30
        while kb.get_item(base.id, note.id).status != "embedding":
            assert time.monotonic() < deadline, "the worker should take the note"
            time.sleep(0.02)
        busy_run = _kb(home, "sync", "b")
        assert kb.get_item(base.id, note.id).status == "embedding", "still busy at the end"
    finally:
        worker.kill()
        kb.close()
    assert busy_run.returncode != 0, busy_run.stderr
    assert "base_busy" in busy_run.stderr and "pid" in busy_run.stderr

    # No live process any more: a second kb sync resumes the work and completes the sync.
    second = _kb(home, "sync", "b", "--json")
    assert second.returncode == 0, second.stderr
    kb = Knowledge(Settings(home=home, test_providers=True))
    try:
        items = [i for i in kb.list_items(base.id) if i.type == "file"]
        assert {i.status for i in kb.list_items(base.id)} == {"completed"}  # the note too
        assert len(items) == FILES + 1 and len({i.origin for i in items}) == FILES + 1
        for item_id in files:  # every changed file holds its new text
            assert "newts" in "".join(c.text for c in kb.list_item_chunks(base.id, item_id))
        assert not [h for h in kb.search(base.id, "owls", top_k=1000).results if "owls" in h.text]
        third = _kb(home, "sync", "b", "--json")
        assert third.returncode == 0 and '"job_id": null' in third.stdout, third.stdout
    finally:
        kb.close()
