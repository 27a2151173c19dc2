"""The facade's first-cut behaviour (issue 2): bases, notes/files, search, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowbase.errors import (
    EmbeddingMismatch,
    EmptyContent,
    NoSearchableTokens,
    NotFound,
    OriginMissing,
    UnsafePath,
    UnsupportedFileType,
)
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import load_settings


@pytest.fixture
def knowledge(tmp_path):
    kb = Knowledge(load_settings(tmp_path / "home"))
    yield kb
    kb.close()


def _raw_files(kb: Knowledge, base_id: str) -> list[Path]:
    raw = kb.rt.storage(base_id).raw
    return sorted(p for p in raw.rglob("*") if p.is_file())


def test_bm25_base_roundtrip(knowledge, tmp_path):
    base = knowledge.create_base("Notes")
    assert base.embedding_model_id is None and base.dimensions is None
    assert (base.chunk_size, base.chunk_overlap) == (1024, 200)
    doc = tmp_path / "guide.md"
    doc.write_text("# Guide\n\nThe llama grazes on the Andean plateau.\n", encoding="utf-8")
    result = knowledge.add(
        "notes", [AddInput.file(doc), AddInput.note("Alpacas give wool.")], wait=True
    )
    assert [i.status for i in knowledge.list_items(base.id)] == ["completed", "completed"]
    hits = knowledge.search("NOTES", "llama plateau").results
    assert hits[0].concept_id == "guide.md"
    assert hits[0].item_id == result.items[0].id
    assert hits[0].rank == 1 and hits[0].score_kind == "keyword"  # a BM25-only base
    assert "llama" in hits[0].text
    assert [b.name for b in knowledge.list_bases()] == ["Notes"]


def test_hash_model_base_is_hybrid(knowledge):
    base = knowledge.create_base("h", embedding_model_id="hash:d64")
    assert base.dimensions == 64
    knowledge.add_note("h", "Comets have icy tails that point away from the sun.")
    response = knowledge.search("h", "icy comets")
    assert response.mode == "hybrid"
    assert response.results[0].concept_id.endswith(".md")


def test_delete_base_removes_everything(knowledge):
    base = knowledge.create_base("gone")
    knowledge.add_note("gone", "some text to index")
    root = knowledge.rt.storage(base.id).root
    assert root.exists()
    knowledge.delete_base("gone")
    assert not root.exists()
    with pytest.raises(NotFound):
        knowledge.get_base(base.id)


def test_live_workers_come_and_go_with_start_and_stop(knowledge):
    assert knowledge.activity.live_workers() == []
    knowledge.start_workers(threads=1)
    try:
        assert len(knowledge.activity.live_workers()) == 1
    finally:
        knowledge.stop_workers()
    assert knowledge.activity.live_workers() == []


def test_empty_note_refused_nothing_written(knowledge):
    base = knowledge.create_base("n")
    for text in ("", "   \n\t "):
        with pytest.raises(EmptyContent) as info:
            knowledge.add("n", [AddInput.note(text)])
        assert info.value.code == "empty_content"
    assert knowledge.list_items(base.id) == []
    assert _raw_files(knowledge, base.id) == []


def test_query_without_tokens(knowledge):
    knowledge.create_base("q")
    knowledge.add_note("q", "hello world")
    with pytest.raises(NoSearchableTokens) as info:
        knowledge.search("q", "?!… —")
    assert info.value.code == "no_searchable_tokens"


def test_unsupported_file_type_refused(knowledge, tmp_path):
    base = knowledge.create_base("u")
    good = tmp_path / "ok.txt"
    good.write_text("fine", encoding="utf-8")
    bad = tmp_path / "tool.exe"
    bad.write_bytes(b"MZ\x00\x00")
    with pytest.raises(UnsupportedFileType) as info:
        knowledge.add("u", [AddInput.file(good), AddInput.file(bad)])
    assert info.value.code == "unsupported_file_type"
    assert knowledge.list_items(base.id) == []  # the good file of the batch was not added either
    assert _raw_files(knowledge, base.id) == []


def test_missing_file_refused(knowledge, tmp_path):
    knowledge.create_base("m")
    with pytest.raises(OriginMissing):
        knowledge.add("m", [AddInput.file(tmp_path / "nope.md")])


def test_path_escaping_the_base_refused(knowledge, tmp_path):
    base = knowledge.create_base("p")
    storage = knowledge.rt.storage(base.id)
    for rel in ("../x", "a/..", ".kb/index.sqlite", "/etc/passwd", "a\x00b"):
        with pytest.raises(UnsafePath) as info:
            storage.path_of(rel)
        assert info.value.code == "unsafe_path"
    assert not (storage.root.parent / "x").exists()


def test_embedding_width_mismatch(knowledge, monkeypatch):
    """A provider answering the wrong width fails the item with a clear code; nothing indexed."""
    base = knowledge.create_base("w", embedding_model_id="hash:d64")
    from knowbase.catalog import bases as base_repo

    with knowledge.rt.catalog.write_tx() as conn:  # pretend the base was created for 32 dims
        from knowbase.catalog.schema import knowledge_base

        conn.execute(
            knowledge_base.update().where(knowledge_base.c.id == base.id).values(dimensions=32)
        )
        base = base_repo.get(conn, base.id)
    knowledge.rt.close_store(base.id)
    item = knowledge.add_note("w", "text about width checks")
    item = knowledge.get_item("w", item.id)
    assert item.status == "failed"
    assert item.error_code == EmbeddingMismatch.code
    assert knowledge.rt.store(base).material_ids() == set()


def test_failed_item_is_invisible(knowledge, tmp_path):
    base = knowledge.create_base("v")
    empty = tmp_path / "blank.md"
    empty.write_text("   \n\n  ", encoding="utf-8")
    knowledge.add("v", [AddInput.file(empty)], wait=True)
    [item] = knowledge.list_items("v")
    assert item.status == "failed" and item.error_code == "no_text_extracted"
    # An item indexed once and failed on reindex keeps its old chunks in the store; search
    # must still not return them (visibility is the catalog's "completed", not the store).
    doc = tmp_path / "guide.md"
    doc.write_text("# Guide\n\nThe llama grazes on the Andean plateau.\n", encoding="utf-8")
    guide = knowledge.add("v", [AddInput.file(doc)], wait=True).items[0]
    assert [h.item_id for h in knowledge.search("v", "llama plateau").results] == [guide.id]
    for copy in (doc, knowledge.rt.storage(base.id).raw / "guide.md"):
        copy.write_text("  \n\n ", encoding="utf-8")
    knowledge.wait([knowledge.reindex_items("v", [guide.id])])
    failed = knowledge.get_item("v", guide.id)
    assert failed.status == "failed" and failed.error_code == "no_text_extracted"
    assert guide.id in knowledge.rt.store(base).material_ids()  # the old chunks are there
    assert knowledge.search("v", "llama plateau").results == []


@pytest.mark.model
def test_local_model_finds_a_paraphrase(knowledge):
    """Dense lane proven real: the query shares no keyword with the right document."""
    knowledge.create_base("dense", embedding_model_id="local:all-minilm-l6-v2")
    base = knowledge.get_base("dense")
    assert (base.dimensions, base.chunk_size, base.chunk_overlap) == (384, 256, 32)
    knowledge.add(
        "dense",
        [
            AddInput.note(
                "Steps to recover access to your account when you forgot your login credentials.",
                title="Account recovery",
            ),
            AddInput.note(
                "The recipe needs two cups of flour, butter and a pinch of salt.",
                title="Shortbread",
            ),
            AddInput.note(
                "Jupiter is the largest planet and has a great red storm.", title="Planets"
            ),
        ],
        wait=True,
    )
    query = "how do I reset my password"
    response = knowledge.search("dense", query)
    assert response.mode == "hybrid"
    best = response.results[0]
    assert best.title == "Account recovery"
    doc_words = set(best.text.lower().replace(".", "").split())
    assert not doc_words & set(query.lower().split())  # no shared keyword at all


def test_delete_base_cancels_every_active_job(knowledge):
    """More active jobs than one page (and than the old first-1,000 read): none survives."""
    from knowbase.operations import kinds
    from knowbase.runtime import queue_of

    base = knowledge.create_base("many-jobs")
    keep = knowledge.create_base("other")
    with knowledge.rt.catalog.write_tx() as conn:
        for base_id, n in ((base.id, 1_205), (keep.id, 3)):
            for i in range(n):
                knowledge.rt.jobs.enqueuer.enqueue(
                    conn,
                    kinds.DELETE_SUBTREE.name,
                    {"base_id": base_id, "root_item_ids": [], "i": i},
                    queue=queue_of(base_id),
                )
    assert knowledge.activity.count_jobs(base=base.id, statuses=["pending"]) == 1_205
    knowledge.delete_base(base.id)
    jobs = knowledge.rt.jobs
    assert jobs.queries.count_jobs(queue=queue_of(base.id), statuses=["pending", "running"]) == 0
    assert jobs.queries.count_jobs(queue=queue_of(base.id), statuses=["cancelled"]) == 1_205
    assert knowledge.activity.count_jobs(base=keep.id, statuses=["pending"]) == 3


def test_rst_json_and_readme_files_are_found_by_search(knowledge, tmp_path):
    """Issue 28: these used to be skipped as unsupported_type."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "guide.rst").write_text(
        "Guide\n=====\n\nThe quokka smiles.\n\nInstall\n-------\n\nRun the marmot installer.\n",
        encoding="utf-8",
    )
    (folder / "data.json").write_text('{"animal": "pangolin", "scales": true}', "utf-8")
    (folder / "README").write_text("This repository feeds the axolotl.\n", encoding="utf-8")
    knowledge.create_base("fmt")
    knowledge.add("fmt", [AddInput.directory(folder)], wait=True)
    found = {
        q: [(h.concept_id, h.locator) for h in knowledge.search("fmt", q).results][:1]
        for q in ("marmot installer", "pangolin", "axolotl")
    }
    assert found["marmot installer"][0][0].endswith("guide.rst")
    assert found["marmot installer"][0][1].get("heading") == ["Guide", "Install"]
    assert found["pangolin"][0][0].endswith("data.json")
    assert found["axolotl"][0][0].endswith("README")


#: Rooms a search of an existing base never needs (issue 39 item 5): every operation (the
#: ingestion workflows, their inputs and handlers), the queue engine, conversion, a folder's
#: reading and staging. Loading them cost a cold ``kb search`` ~0.25 s on a quiet two-core
#: machine.
SEARCH_NEVER_IMPORTS = (
    "knowbase.operations",
    "knowbase.jobs.manager",
    "knowbase.jobs.worker",
    "knowbase.jobs.claims",
    "knowbase.pipeline.processing",
    "knowbase.pipeline.readers",
    "knowbase.pipeline.sources",
    "knowbase.files.staging",
    "knowbase.portable",
)
#: ... and what a BM25-only base's search never needs either: the dense lane's numpy (and
#: sqlite-vec's package, whose ``__init__`` imports it) and the embedding providers.
BM25_SEARCH_NEVER_IMPORTS = ("numpy", "sqlite_vec", "onnxruntime", "knowbase.providers.local")


def test_a_kb_search_process_imports_no_ingestion_jobs_or_processing_room(tmp_path):
    import os
    import subprocess
    import sys

    home = tmp_path / "home"
    with Knowledge(load_settings(home)) as kb:
        base = kb.create_base("docs")
        kb.add(base.id, [AddInput.note("otters hold hands while they sleep")], wait=True)
    env = {**os.environ, "KNOWBASE_HOME": str(home)}
    cmd = [sys.executable, "-X", "importtime", "-m", "knowbase.interfaces.cli", "search"]
    never = (*SEARCH_NEVER_IMPORTS, *BM25_SEARCH_NEVER_IMPORTS)  # "docs" has no model
    for output in ([], ["--json"]):
        done = subprocess.run(
            [*cmd, "docs", "otters", *output], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0 and "otters" in done.stdout, done.stdout + done.stderr[-2000:]
        lines = done.stderr.splitlines()
        loaded = {line.rsplit("|", 1)[-1].strip() for line in lines if "|" in line}
        assert "knowbase.search.search" in loaded  # the probe sees the search's own modules
        wrong = sorted(m for m in loaded for n in never if m == n or m.startswith(n + "."))
        assert wrong == [], output
