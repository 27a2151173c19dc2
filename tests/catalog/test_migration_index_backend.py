"""Migration 0002s on a database made before it: existing bases keep ``sqlite``; new ones get
the backend next to their catalog; PostgreSQL gets the index tables."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from knowbase.catalog import bases as base_repo
from knowbase.catalog.db import Catalog
from knowbase.catalog.migrate import alembic_config


def _old_database(url: str) -> Catalog:
    """A catalog at 0001 as released: without the ``index_backend`` column, one base in it."""
    cat = Catalog(url)
    command.upgrade(alembic_config(cat.engine), "0001")
    with cat.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE knowledge_base DROP COLUMN index_backend")
        conn.exec_driver_sql(
            "INSERT INTO knowledge_base (id, name, name_key, created_at, updated_at)"
            " VALUES ('old', 'Old', 'old', 0, 0)"
        )
    return cat


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_upgrade_keeps_old_bases_on_sqlite(engine: str, tmp_path: Path, request) -> None:
    if engine == "sqlite":
        url = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    else:
        url = request.getfixturevalue("pg_empty_url")
    cat = _old_database(url)
    try:
        cat.create_schema()  # to head
        with cat.write_tx() as conn:
            assert base_repo.get(conn, "old").index_backend == "sqlite"
            new = base_repo.insert(conn, name="New")
        assert new.index_backend == ("sqlite" if engine == "sqlite" else "postgres")
        tables = set(sa.inspect(cat.engine).get_table_names())
        pg_tables = {"kb_index", "kb_content", "kb_material", "kb_unit"}
        assert (pg_tables <= tables) == (engine == "postgres")
    finally:
        cat.dispose()
