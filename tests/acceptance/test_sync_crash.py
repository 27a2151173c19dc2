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
from knowbase.ingestion.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import Settings

pytestmark = pytest.mark.timeout(120)
FILES = 12


def test_kill_9_mid_sync_recovers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    root = tmp_path / "docs"
    root.mkdir()
    for n in range(FILES):
        (root / f"f{n}.md").write_text(f"file {n} about old owls", encoding="utf-8")
    kb = Knowledge(Settings(home=home, test_providers=True))
    base = kb.create_base(
        "b", embedding_model_id="hash:d16?delay=0.4", file_processor_id=None, document_count=50
    )
    kb.add(base.id, [AddInput.directory(root)], wait=True, timeout_s=100)
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
        newts = {h.concept_id for h in kb.search(base.id, "newts").results if "newts" in h.text}
        assert len(newts) == FILES
        assert not any("owls" in h.text for h in kb.search(base.id, "owls").results)
        store = kb.rt.store(kb.get_base(base.id))
        assert store.unit_material_ids() <= {i.id for i in files}
        assert kb.sync(base.id, wait=True).job_id is None
    finally:
        kb.close()
