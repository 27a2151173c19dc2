"""The organisation tree reads what it shows: paged per level, same nodes as the whole-base DFS."""

from __future__ import annotations

import random
import re

import pytest
import sqlalchemy as sa

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base
from knowbase.catalog.schema import knowledge_item as it
from knowbase.search.concepts import TREE_MAX_NODES, TREE_PAGE, build_tree
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(120)


def _whole_base_tree(kb: Knowledge, base: Base, max_depth: int | None = None):  # type: ignore[no-untyped-def]
    """The reference: every non-deleting item loaded, then the in-memory DFS."""
    with kb.rt.catalog.read() as conn:
        items = item_repo.list_items(conn, base.id)
    nodes, truncated = build_tree(items, max_depth=max_depth)
    return {"base_id": base.id, "nodes": nodes, "truncated": truncated, "total_items": len(items)}


def _random_tree(kb: Knowledge, base: Base, seed: int, n: int) -> list[str]:
    """Directories nested up to 4 deep with files and notes; returns the directory ids."""
    rng = random.Random(seed)
    dirs: list[tuple[str, int]] = []
    with kb.rt.catalog.write_tx() as conn:
        for i in range(n):
            parent = rng.choice([None, *dirs]) if dirs else None
            group_id, depth = (parent[0], parent[1] + 1) if parent else (None, 0)
            if depth < 4 and rng.random() < 0.25:
                row = item_repo.insert_active(
                    conn, base_id=base.id, type="directory", data={"source": f"dir{i}"},
                    group_id=group_id, reconcile=False,
                )  # fmt: skip
                dirs.append((row.id, depth))
            elif rng.random() < 0.5:
                item_repo.insert_active(
                    conn, base_id=base.id, type="note", data={"source": f"note {i}"},
                    group_id=group_id, reconcile=False,
                )  # fmt: skip
            else:
                item_repo.insert_active(
                    conn, base_id=base.id, type="file",
                    data={"source": f"f{i}.md", "relative_path": f"f{i}.md"},
                    group_id=group_id, reconcile=False,
                )  # fmt: skip
    return [d for d, _ in dirs]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_paged_tree_equals_the_whole_base_dfs(kb: Knowledge, bm25_base: Base, seed: int) -> None:
    dirs = _random_tree(kb, bm25_base, seed, 300)
    rng = random.Random(seed)
    with kb.rt.catalog.write_tx() as conn:
        # some completed leaves (they carry concept ids) and one folder being deleted while
        # its children are not yet: those children show as roots
        ids = [r.id for r in conn.execute(sa.select(it.c.id).where(it.c.type == "file"))]
        conn.execute(
            it.update()
            .where(it.c.id.in_(rng.sample(ids, len(ids) // 2)))
            .values(status="completed")
        )
        parents = {r[0] for r in conn.execute(sa.select(it.c.group_id).distinct())} - {None}
        doomed = rng.choice(sorted(parents & set(dirs)))
        conn.execute(it.update().where(it.c.id == doomed).values(status="deleting"))
    for max_depth in (None, 0, 1, 3):
        paged = kb.concepts.organization_tree(bm25_base.id, max_depth=max_depth)
        assert paged == _whole_base_tree(kb, bm25_base, max_depth)
    assert any("concept_id" in n for n in paged["nodes"])
    assert doomed not in {n["item_id"] for n in paged["nodes"]}


def test_a_big_base_reads_only_the_page_it_shows(kb: Knowledge, bm25_base: Base) -> None:
    n = 3 * TREE_MAX_NODES
    with kb.rt.catalog.write_tx() as conn:
        for i in range(n):
            item_repo.insert_active(
                conn, base_id=bm25_base.id, type="note", data={"source": f"note {i}"},
                reconcile=False,
            )  # fmt: skip
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if "knowledge_item" in statement:
            statements.append(statement)

    engine = kb.rt.catalog.engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        tree = kb.concepts.organization_tree(bm25_base.id)
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert tree == _whole_base_tree(kb, bm25_base)  # same answer as loading everything
    assert tree["truncated"] is True and len(tree["nodes"]) == TREE_MAX_NODES
    assert tree["total_items"] == n
    # Every item query is limited to a page, and only as many pages as the 1,000 nodes shown
    # (+1 to see there is more, + the orphan check) are read: not the 3,000 items of the base.
    selects = [s for s in statements if not re.search(r"count\(\*\)", s)]
    assert all(re.search(r"\bLIMIT\b", s) for s in selects), selects
    assert len(selects) <= TREE_MAX_NODES // TREE_PAGE + 2
    assert len(selects) * TREE_PAGE < n
