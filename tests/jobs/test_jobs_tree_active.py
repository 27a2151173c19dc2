"""``JobQueries.tree_active``: what a waiting ``kb add`` polls, counted in SQL."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from knowbase.catalog.models import Base
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def docs(src: Path) -> Path:
    """A folder of three documents: its add is a root job and three index jobs."""
    (src / "docs").mkdir(parents=True, exist_ok=True)
    for i in range(3):
        (src / "docs" / f"d{i}.md").write_text(f"document {i}", encoding="utf-8")
    return src / "docs"


def test_tree_active_counts_the_unfinished_jobs_of_the_tree(
    kb: Knowledge, bm25_base: Base, docs: Path
) -> None:
    other = kb.add(bm25_base.id, [AddInput.note("another add's job")]).job_ids
    roots = kb.add(bm25_base.id, [AddInput.directory(docs)]).job_ids
    assert kb.rt.jobs.queries.tree_active(roots) == 1  # prepare-root, not yet expanded
    assert kb.rt.jobs.queries.tree_active([*roots, *other]) == 2
    assert kb.rt.jobs.queries.tree_active([]) == 0
    kb.wait(roots, timeout_s=30)
    tree = kb.activity.job_tree(roots)
    assert len(tree) == 4 and all(j.is_terminal for j in tree)  # root + 3 index jobs
    assert kb.rt.jobs.queries.tree_active(roots) == 0


def test_any_unfinished_is_false_once_every_job_is_terminal(kb: Knowledge, bm25_base: Base) -> None:
    assert not kb.rt.jobs.queries.any_unfinished()
    roots = kb.add(bm25_base.id, [AddInput.note("a note")]).job_ids
    assert kb.rt.jobs.queries.any_unfinished()
    kb.wait(roots, timeout_s=30)
    assert not kb.rt.jobs.queries.any_unfinished()


def test_a_wait_ends_when_the_tree_finishes_not_at_its_next_count(
    kb: Knowledge, bm25_base: Base, docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting the tree is spaced by 9x its cost; a dear count (1 s here) must not keep a
    finished add waiting ~9 s more: the idle worker ends the wait."""
    real = kb.rt.jobs.queries.tree_active
    counts: list[int] = []

    def dear_count(job_ids: list[str]) -> int:
        counts.append(real(job_ids))
        time.sleep(1.0)
        return counts[-1]

    monkeypatch.setattr(kb.rt.jobs.queries, "tree_active", dear_count)
    started = time.monotonic()
    kb.add(bm25_base.id, [AddInput.directory(docs)], wait=True, timeout_s=60)
    took = time.monotonic() - started
    assert counts and counts[0] > 0  # the first count saw the tree running
    assert took < 6.0, f"the wait took {took:.1f} s after {len(counts)} counts"
    assert kb.counts(bm25_base.id).get("completed") == 3  # the folder's 3 files
