"""The paged organisation tree on a real PostgreSQL: the same nodes as the whole-base DFS."""

from __future__ import annotations

import pytest

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.db import Catalog
from knowbase.catalog.schema import knowledge_item
from knowbase.search.concepts import TREE_MAX_NODES, build_tree, catalog_tree

pytestmark = pytest.mark.timeout(120)


def test_paged_tree_matches_whole_base_dfs(pg_url: str) -> None:
    catalog = Catalog(pg_url)
    try:
        with catalog.write_tx() as conn:
            base = base_repo.insert(conn, name="docs")
            dirs = []
            for d in range(3):
                top = item_repo.insert_active(
                    conn, base_id=base.id, type="directory", data={"source": f"/d{d}"},
                    reconcile=False,
                )  # fmt: skip
                dirs.append(top.id)
                for i in range(450):  # 1,350 leaves: the tree stops at 1,000 nodes
                    item_repo.insert_active(
                        conn, base_id=base.id, type="note", data={"source": f"n{d}.{i}"},
                        group_id=top.id, reconcile=False,
                    )  # fmt: skip
        with catalog.write_tx() as conn:  # a folder being deleted: its children become roots
            doomed = knowledge_item.c.id == dirs[1]
            conn.execute(knowledge_item.update().where(doomed).values(status="deleting"))
        with catalog.read() as conn:
            items = item_repo.list_items(conn, base.id)
            for max_depth in (None, 0, 1):
                nodes, truncated, total = catalog_tree(conn, base.id, max_depth=max_depth)
                assert (nodes, truncated) == build_tree(items, max_depth=max_depth)
                assert total == len(items) == 3 + 3 * 450 - 1
            full, truncated, _ = catalog_tree(conn, base.id)
            assert truncated is True and len(full) == TREE_MAX_NODES
    finally:
        catalog.dispose()
