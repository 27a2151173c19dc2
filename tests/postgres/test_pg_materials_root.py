"""A worker on "another machine": its own home, the same PostgreSQL catalog and the same
materials root (``KNOWBASE_MATERIALS_ROOT``). The adding process runs no worker; the remote
``kb worker`` reads the copies under the shared root and indexes them (issue 14: no code
assumes the process that added a file indexes it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import Settings, load_settings

pytestmark = pytest.mark.timeout(180)

REMOTE = Path(__file__).with_name("remote_kb_worker.py")


def test_a_worker_with_another_home_indexes_from_the_shared_materials_root(
    tmp_path: Path, pg_url: str
) -> None:
    shared = tmp_path / "nfs" / "materials"
    adder_home, worker_home = tmp_path / "host-a", tmp_path / "host-b"
    settings = Settings(
        home=adder_home, database_url=pg_url, test_providers=True, materials_root=shared
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNOWBASE_")}
    env.update(
        KNOWBASE_HOME=str(worker_home),
        KNOWBASE_DATABASE_URL=pg_url,
        KNOWBASE_MATERIALS_ROOT=str(shared),
        KNOWBASE_TEST_PROVIDERS="1",
    )
    assert load_settings(worker_home, materials_root=None).bases_dir == worker_home / "bases"
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(5):
        (folder / f"doc{i}.md").write_text(f"# Doc {i}\n\nOtters number {i} hold hands.\n")
    log = tmp_path / "worker.log"
    worker: subprocess.Popen[bytes] | None = None
    with Knowledge(settings) as kb:
        try:
            base = kb.create_base("shared", file_processor_id=None)  # BM25: no pgvector needed
            kb.add(base.id, [AddInput.directory(folder)])  # enqueued; no worker here
            assert (shared / base.id / "raw").is_dir()
            assert not (adder_home / "bases" / base.id).exists()
            worker = subprocess.Popen(
                [sys.executable, str(REMOTE), "host-b", "30", "worker"],
                stdout=subprocess.DEVNULL,
                stderr=log.open("wb"),
                env=env,
            )
            deadline = time.monotonic() + 120
            while True:
                files = [i for i in kb.list_items(base.id) if i.type == "file"]
                if len(files) == 5 and all(i.status == "completed" for i in files):
                    break
                assert worker.poll() is None, log.read_text()
                assert time.monotonic() < deadline, ([i.status for i in files], log.read_text())
                time.sleep(0.1)
            hits = kb.search("shared", "otters number 3").results
            assert hits and hits[0].concept_id.endswith("doc3.md")
            assert not (worker_home / "bases" / base.id).exists()  # it read the shared root
        finally:
            if worker is not None and worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(30)
