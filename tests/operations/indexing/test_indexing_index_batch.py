"""Index jobs that carry many documents (issue 30 item 1): one claim, one batch, per-item fences.

- ``kill -9`` inside a batch: every unfinished item of it goes back to pending and finishes in
  the next process; none stays ``reading``/``embedding``; a batch that dies on every attempt
  ends each item ``failed indexing_interrupted`` after the kind's attempts (bounded).
- a delete of one item of a running batch: its batch-mates index, it leaves no rows.
- one corrupt file in a batch fails only that item.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from knowbase.catalog.models import Base
from knowbase.operations import kinds
from knowbase.operations.add.inputs import AddInput
from knowbase.operations.indexing import index_batch
from knowbase.service import Knowledge
from knowbase.settings import Settings

pytestmark = pytest.mark.timeout(180)


def make_folder(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"d{i:02d}.md").write_text(
            f"# Doc {i}\n\nDocument {i} is about marmots, number {i * 7}.\n", encoding="utf-8"
        )
    return folder


def file_items(kb: Knowledge, base_id: str) -> dict[str, object]:
    return {i.title: i for i in kb.list_items(base_id) if i.type == "file"}


def test_one_claim_carries_many_items_and_each_job_keeps_its_outcome(
    kb: Knowledge, bm25_base: Base, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches: list[int] = []
    real = index_batch.read_files

    def counting(rt, base, items, **kw):  # type: ignore[no-untyped-def]
        batches.append(len(items))
        return real(rt, base, items, **kw)

    monkeypatch.setattr(index_batch, "read_files", counting)
    result = kb.add(bm25_base.id, [AddInput.directory(make_folder(src / "docs", 30))], wait=True)
    items = file_items(kb, bm25_base.id)
    assert {i.status for i in items.values()} == {"completed"}  # type: ignore[attr-defined]
    assert len(items) == 30 and max(batches) > 1 and sum(batches) == 30
    jobs = [
        j for j in kb.rt.jobs.queries.tree(result.job_ids) if j.kind == kinds.INDEX_DOCUMENTS.name
    ]
    assert len(jobs) == 30 and {(j.status, j.attempts) for j in jobs} == {("completed", 1)}


def test_one_corrupt_file_in_a_batch_fails_only_that_item(
    kb: Knowledge, bm25_base: Base, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_folder(src / "docs", 12)
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 not really a pdf " * 20)
    seen: list[list[str]] = []
    real = index_batch.read_files

    def recording(rt, base, items, **kw):  # type: ignore[no-untyped-def]
        seen.append([i.title for i in items])
        return real(rt, base, items, **kw)

    monkeypatch.setattr(index_batch, "read_files", recording)
    kb.add(bm25_base.id, [AddInput.directory(folder)], wait=True)
    assert any("broken.pdf" in batch and len(batch) > 1 for batch in seen), seen
    items = file_items(kb, bm25_base.id)
    broken = items.pop("broken.pdf")
    assert (broken.status, broken.error_code) == ("failed", "unreadable_file")  # type: ignore[attr-defined]
    assert {i.status for i in items.values()} == {"completed"}  # type: ignore[attr-defined]
    assert len(items) == 12


def test_a_delete_inside_a_running_batch_skips_that_item_and_its_mates_index(
    kb: Knowledge, bm25_base: Base, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reached, go = threading.Event(), threading.Event()
    batch_items: list[str] = []
    real = index_batch._write

    def paused(rt, base, entries, embeddings):  # type: ignore[no-untyped-def]
        if not reached.is_set():
            batch_items.extend(e.ctx.payload["item_id"] for e in entries)
            reached.set()
            assert go.wait(60)
        return real(rt, base, entries, embeddings)

    monkeypatch.setattr(index_batch, "_write", paused)
    kb.add(bm25_base.id, [AddInput.directory(make_folder(src / "docs", 10))])
    runner = threading.Thread(target=kb.run_until_idle, kwargs={"timeout_s": 120})
    runner.start()
    try:
        assert reached.wait(60), "no batch reached its write"
        assert len(batch_items) > 1
        victim = batch_items[0]
        kb.delete_items(bm25_base.id, [victim], wait=True)  # its rows are gone before the write
    finally:
        go.set()
        runner.join(150)
    kb.run_until_idle(timeout_s=60)
    items = {i.id: i for i in kb.list_items(bm25_base.id) if i.type == "file"}
    assert victim not in items
    assert all(items[i].status == "completed" for i in batch_items[1:])
    store = kb.rt.store(kb.get_base(bm25_base.id))
    assert store.list_units(victim) == []
    assert all(store.list_units(i) for i in batch_items[1:])


_CRASHING_IMPORT = """
import os, signal, sys
from pathlib import Path
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import Settings
from knowbase.operations.indexing import index_batch

real = index_batch._write
def write(rt, base, entries, embeddings):  # inside a batch: read, chunked, statuses written
    if len(entries) > 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(rt, base, entries, embeddings)
index_batch._write = write
settings = Settings(home=Path(sys.argv[1]), database_url=sys.argv[4] or None, test_providers=True)
kb = Knowledge(settings)
if sys.argv[3]:
    kb.add(sys.argv[2], [AddInput.directory(sys.argv[3])], wait=True, timeout_s=60)
else:
    kb.run_until_idle(timeout_s=60)
"""


def crash(kb_settings: Settings, base_id: str, folder: Path | None) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNOWBASE_")}
    env["KNOWBASE_TEST_PROVIDERS"] = "1"
    args = [str(kb_settings.home), base_id, str(folder or ""), kb_settings.database_url or ""]
    proc = subprocess.run(
        [sys.executable, "-c", _CRASHING_IMPORT, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr[-3000:]


def index_jobs(kb: Knowledge, base_id: str) -> list:
    return [j for j in kb.activity.list_jobs(base=base_id) if j.kind == kinds.INDEX_DOCUMENTS.name]


def drain(kb: Knowledge, base_id: str) -> None:
    kb.start_workers()  # boot recovery: the dead process's running jobs by their policy
    deadline = time.monotonic() + 120
    while any(not j.is_terminal for j in kb.activity.list_jobs(base=base_id)):
        assert time.monotonic() < deadline, "the queue did not drain"
        time.sleep(0.1)
    kb.stop_workers()


@pytest.mark.slow
def test_kill_9_inside_a_batch_requeues_its_items_and_they_finish(
    kb_settings: Settings, src: Path
) -> None:
    with Knowledge(kb_settings) as kb:
        base = kb.create_base("crash", file_processor_id=None)
    crash(kb_settings, base.id, make_folder(src / "docs", 20))
    with Knowledge(kb_settings) as kb:
        running = [j for j in index_jobs(kb, base.id) if j.status == "running"]
        assert len(running) > 1  # the batch died with its jobs claimed
        statuses = {i.status for i in kb.list_items(base.id) if i.type == "file"}
        assert statuses & {"reading", "embedding"}  # and its items mid-way
        drain(kb, base.id)
        items = file_items(kb, base.id)
        assert len(items) == 20 and {i.status for i in items.values()} == {"completed"}  # type: ignore[attr-defined]
        by_id = {j.id: j for j in index_jobs(kb, base.id)}
        assert {by_id[j.id].attempts for j in running} == {2}  # resumed, not restarted
        assert all(by_id[j.id].status == "completed" for j in running)


@pytest.mark.slow
def test_a_batch_that_dies_on_every_attempt_ends_its_items_interrupted(
    kb_settings: Settings, src: Path
) -> None:
    with Knowledge(kb_settings) as kb:
        base = kb.create_base("crash", file_processor_id=None)
    crash(kb_settings, base.id, make_folder(src / "docs", 6))
    for _ in range(kinds.INDEX_DOCUMENTS.max_attempts - 1):
        crash(kb_settings, base.id, None)  # its boot recovery re-queues, the batch dies again
    with Knowledge(kb_settings) as kb:
        drain(kb, base.id)
        items = file_items(kb, base.id)
        assert len(items) == 6
        assert {(i.status, i.error_code) for i in items.values()} == {  # type: ignore[attr-defined]
            ("failed", "indexing_interrupted")
        }
        assert {j.attempts for j in index_jobs(kb, base.id)} == {kinds.INDEX_DOCUMENTS.max_attempts}
