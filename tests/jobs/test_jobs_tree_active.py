"""``JobManager.tree_active``: what a waiting ``kb add`` polls, counted in SQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowbase.catalog.models import Base
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


def test_tree_active_counts_the_unfinished_jobs_of_the_tree(
    kb: Knowledge, bm25_base: Base, src: Path
) -> None:
    for i in range(3):
        (src / "docs").mkdir(parents=True, exist_ok=True)
        (src / "docs" / f"d{i}.md").write_text(f"document {i}", encoding="utf-8")
    other = kb.add(bm25_base.id, [AddInput.note("another add's job")]).job_ids
    roots = kb.add(bm25_base.id, [AddInput.directory(src / "docs")]).job_ids
    assert kb.rt.jobs.tree_active(roots) == 1  # prepare-root, not yet expanded
    assert kb.rt.jobs.tree_active([*roots, *other]) == 2
    assert kb.rt.jobs.tree_active([]) == 0
    kb.wait(roots, timeout_s=30)
    tree = kb.activity.job_tree(roots)
    assert len(tree) == 4 and all(j.is_terminal for j in tree)  # root + 3 index jobs
    assert kb.rt.jobs.tree_active(roots) == 0
