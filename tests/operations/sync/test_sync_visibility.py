"""A document being reindexed stays searchable (issue 26 item 5; docs/sync.md: "a search sees
the old version or the new one").

A sync reindexes changed files in place while searches run beside it: a search for text both
versions hold must find every document, old or new, at every moment — never nothing. Runs over
every index backend in the conformance runs (``KB_TEST_BACKENDS``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from knowbase.catalog.schema import ACTIVE_STATUSES
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(120)
FILES = 10


def test_documents_reindexed_by_a_sync_never_vanish_from_search(kb: Knowledge, src: Path) -> None:
    root = src / "docs"
    root.mkdir()
    for n in range(FILES):
        (root / f"f{n}.md").write_text(f"file {n} about marmots and old owls", encoding="utf-8")
    base = kb.create_base("b", embedding_model_id="hash:d16?delay=0.2", file_processor_id=None)
    kb.add(base.id, [AddInput.directory(root)], wait=True, timeout_s=100)
    files = {i.id for i in kb.list_items(base.id) if i.type == "file"}
    assert len(files) == FILES
    for n in range(FILES):
        (root / f"f{n}.md").write_text(f"file {n} about marmots and new newts", encoding="utf-8")

    report = kb.sync(base.id)
    assert len(report.changed) == FILES and report.job_id
    searches, misses, while_reindexing = 0, [], 0
    kb.start_workers()
    try:
        deadline = time.monotonic() + 90
        while kb.rt.jobs.queries.tree_active([report.job_id]):
            assert time.monotonic() < deadline, "the sync did not finish"
            reindexing = {i.id for i in kb.list_items(base.id) if i.status in ACTIVE_STATUSES}
            response = kb.search(base.id, "marmots", top_k=50)
            found = {h.item_id for h in response.results}
            searches += 1
            while_reindexing += bool(reindexing)
            if found != files:
                statuses = {i.id: i.status for i in kb.list_items(base.id)}
                misses.append((sorted(statuses[i] for i in files - found), response.explain))
    finally:
        kb.stop_workers()
    assert while_reindexing >= 5, "the searches should run while files are reindexed"
    assert misses == [], f"{len(misses)} of {searches} searches lost documents"
    newts = {h.item_id for h in kb.search(base.id, "newts", top_k=50).results}
    assert newts == files
    assert not [h for h in kb.search(base.id, "owls", top_k=50).results if "owls" in h.text]
