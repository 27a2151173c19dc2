"""Alembic brings a catalog from an older revision to head (SQLite here; PostgreSQL in
tests/postgres/test_pg_catalog.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from knowbase.catalog.db import Catalog
from knowbase.catalog.migrate import HEAD_REVISION, head_revision, stored_revision

pytestmark = pytest.mark.timeout(60)

NEW_IN_0002J = {
    "knowledge_item": "knowledge_item_base_updated_idx",
    "job": "job_queue_updated_idx",
}


def as_of_0001(catalog: Catalog) -> None:
    """Turn a head catalog into what 0001 left on a database made before 0002j."""
    with catalog.engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE item_tombstone"))
        for name in (*NEW_IN_0002J.values(), "job_finished_idx"):
            conn.execute(sa.text(f"DROP INDEX {name}"))
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0001'"))


def test_upgrade_from_0001_adds_the_change_feed_objects(tmp_path: Path) -> None:
    catalog = Catalog(f"sqlite:///{tmp_path / 'catalog.sqlite'}")
    try:
        catalog.create_schema()
        as_of_0001(catalog)
        assert not sa.inspect(catalog.engine).has_table("item_tombstone")
        catalog.create_schema()
        inspector = sa.inspect(catalog.engine)
        assert inspector.has_table("item_tombstone")
        for table, index in NEW_IN_0002J.items():
            assert index in {i["name"] for i in inspector.get_indexes(table)}
        catalog.create_schema()  # at head: nothing to do
    finally:
        catalog.dispose()


def test_the_head_every_open_compares_with_is_alembics_head() -> None:
    assert head_revision() == HEAD_REVISION  # a new migration must move HEAD_REVISION too


def test_a_catalog_at_head_opens_without_loading_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    fresh = Catalog(url)
    assert stored_revision(fresh.engine) is None  # no schema yet: Alembic will run
    fresh.create_schema()
    assert stored_revision(fresh.engine) == HEAD_REVISION
    fresh.engine.dispose()
    script = (
        "import sys\n"
        "from knowbase.catalog.db import Catalog\n"
        f"Catalog({url!r}).create_schema()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_catalog_behind_head_is_still_upgraded_by_alembic(tmp_path: Path) -> None:
    catalog = Catalog(f"sqlite:///{tmp_path / 'catalog.sqlite'}")
    try:
        catalog.create_schema()
        with catalog.engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = '0005k'"))
        catalog.create_schema()  # 0006c checks before it changes anything
        assert stored_revision(catalog.engine) == HEAD_REVISION
    finally:
        catalog.engine.dispose()
