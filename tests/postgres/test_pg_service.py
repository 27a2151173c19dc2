"""The whole ``Knowledge`` facade with its catalog on a real PostgreSQL 18.

The catalog (bases, items, jobs, workers) and, for new bases, the derived index (the
``postgres`` backend: ``kb_*`` tables, pgvector) live in PostgreSQL; ``raw/`` stays on disk.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from knowbase.catalog import items as item_repo
from knowbase.catalog.schema import job as job_t
from knowbase.errors import Conflict, NotFound
from knowbase.operations import kinds
from knowbase.operations.add.inputs import AddInput
from knowbase.processes import this_host
from knowbase.service import Knowledge
from knowbase.settings import Settings

pytestmark = pytest.mark.timeout(120)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def kb(tmp_path: Path, pg_url: str) -> Iterator[Knowledge]:
    knowledge = Knowledge(
        Settings(home=tmp_path / "home", database_url=pg_url, test_providers=True)
    )
    try:
        yield knowledge
    finally:
        knowledge.close()


def test_catalog_and_index_are_postgres(kb: Knowledge, tmp_path: Path) -> None:
    assert kb.rt.catalog.engine.dialect.name == "postgresql"
    base = kb.create_base("Notes", file_processor_id=None)
    assert base.index_backend == "postgres"
    item = kb.add_note("notes", "Alpacas give wool.", wait=True)
    assert not (tmp_path / "home" / "catalog.sqlite").exists()
    assert not (kb.rt.storage(base.id).root / ".kb" / "index.sqlite").exists()
    with kb.rt.catalog.read() as conn:
        rows = conn.execute(
            sa.text("SELECT material_id FROM kb_material WHERE base_id = :b"), {"b": base.id}
        ).all()
    assert rows == [(item.id,)]
    assert kb.search("notes", "alpacas").results[0].item_id == item.id
    kb.delete_base(base.id)
    with kb.rt.catalog.read() as conn:  # the index rows went with the base
        assert conn.execute(sa.text("SELECT count(*) FROM kb_unit")).scalar() == 0


def test_bm25_base_end_to_end(kb: Knowledge, tmp_path: Path) -> None:
    base = kb.create_base("Docs", file_processor_id=None)
    with pytest.raises(Conflict):
        kb.create_base(" docs ")
    src = tmp_path / "src"
    write(src / "folder" / "llama.md", "# Llamas\n\nThe llama grazes on the Andean plateau.\n")
    write(src / "folder" / "deep" / "comet.txt", "Comets have icy tails.\n")
    write(src / "folder" / "ignored.bin", "\x00\x01")
    guide = write(src / "guide.md", "# Guide\n\nVolcanoes erupt molten basalt.\n")
    result = kb.add(
        "docs",
        [
            AddInput.file(guide),
            AddInput.note("Penguins huddle in the Antarctic winter.", title="birds"),
            AddInput.directory(src / "folder"),
        ],
        wait=True,
        timeout_s=90,
    )
    items = kb.list_items(base.id)
    roots = [i for i in items if i.group_id is None]
    assert [i.status for i in roots] == ["completed"] * 3, [
        (i.type, i.status, i.error_code) for i in items
    ]
    assert all(j.status == "completed" for j in kb.activity.job_tree(result.job_ids))
    assert kb.search("docs", "llama plateau").results[0].concept_id.endswith("llama.md")
    assert kb.search("docs", "icy comets").results[0].concept_id.endswith("comet.txt")
    penguins = kb.search("docs", "penguins antarctic").results
    assert penguins and penguins[0].item_id == result.items[1].id
    # Delete the folder: its rows, files and index units go; the rest stays searchable.
    folder = result.items[2]
    kb.delete_items("docs", [folder.id], wait=True)
    assert {i.id for i in kb.list_items(base.id)} == {result.items[0].id, result.items[1].id}
    assert kb.search("docs", "llama plateau").results == []
    assert kb.search("docs", "volcanoes basalt").results[0].concept_id == "guide.md"
    kb.delete_base("docs")
    with pytest.raises(NotFound):
        kb.get_base(base.id)


def test_hash_model_base_is_hybrid(kb: Knowledge, pg_server) -> None:
    if not pg_server.has_vector:
        pytest.skip("a vector base on PostgreSQL needs pgvector: run .ci/pgvector.sh")
    base = kb.create_base("h", embedding_model_id="hash:d64", file_processor_id=None)
    assert base.dimensions == 64
    kb.add_note("h", "Comets have icy tails that point away from the sun.")
    response = kb.search("h", "icy comets")
    assert response.mode == "hybrid"
    assert response.results[0].concept_id.endswith(".md")


def test_sweep_fails_active_items_without_a_live_job(kb: Knowledge, tmp_path: Path) -> None:
    base = kb.create_base("b", file_processor_id=None)
    src = tmp_path / "src"
    write(src / "docs" / "a.md", "alpha")
    leaf = kb.add(base.id, [AddInput.file(write(src / "b.md", "beta"))]).items[0]
    folder = kb.add(base.id, [AddInput.directory(src / "docs")]).items[0]
    assert kb.recover().interrupted == []  # their jobs are pending: covered
    with kb.rt.catalog.write_tx() as conn:  # a crash that lost the jobs
        conn.execute(sa.delete(job_t))
    report = kb.recover()
    assert sorted(report.interrupted) == sorted([leaf.id, folder.id])
    for item_id in (leaf.id, folder.id):
        item = kb.get_item(base.id, item_id)
        assert (item.status, item.error_code) == ("failed", "indexing_interrupted")
    assert kb.recover().interrupted == []


def _dead_local_worker_id() -> str:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    return f"{this_host()}:{int(proc.stdout)}:1"


def test_sweep_recovers_jobs_of_a_dead_local_worker_by_policy(
    kb: Knowledge, tmp_path: Path
) -> None:
    base = kb.create_base("b", file_processor_id=None)
    src = tmp_path / "src"
    done = kb.add(base.id, [AddInput.file(write(src / "keep.md", "keep me"))], wait=True).items[0]
    # An index job and a delete job, both held by a dead pid; both recover by retry (issue 26:
    # interrupted work resumes, bounded by attempts).
    added = kb.add(base.id, [AddInput.file(write(src / "a.md", "alpha"))])
    item = added.items[0]
    delete_job = kb.delete_items(base.id, [done.id])
    dead = _dead_local_worker_id()
    claimed = kb.rt.jobs.claims.claim(dead, limit=10)
    assert {j.kind for j in claimed} == {kinds.INDEX_DOCUMENTS.name, kinds.DELETE_SUBTREE.name}
    kb.recover()
    assert kb.get_item(base.id, item.id).status == "processing"  # re-queued, not failed
    for job_id in (delete_job, *added.job_ids):
        requeued = kb.activity.get_job(job_id)
        assert (requeued.status, requeued.attempts, requeued.locked_by) == ("pending", 1, None)
    kb.wait([delete_job, *added.job_ids], timeout_s=60)
    assert kb.activity.get_job(delete_job).status == "completed"
    assert kb.get_item(base.id, item.id).status == "completed"
    with kb.rt.catalog.read() as conn:
        assert item_repo.find(conn, done.id) is None
