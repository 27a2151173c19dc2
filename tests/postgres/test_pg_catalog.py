"""What the catalog does only on PostgreSQL 18: Alembic on an empty database, and a name race
under READ COMMITTED. CHECKs, cascades and the roll-up run on every backend in
``tests/catalog/test_catalog_items.py`` (``backend_catalog``)."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from knowbase.catalog import bases as base_repo
from knowbase.catalog.db import Catalog
from knowbase.catalog.migrate import alembic_config
from knowbase.catalog.schema import metadata
from knowbase.errors import Conflict

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def catalog(pg_url: str):
    c = Catalog(pg_url)
    yield c
    c.dispose()


def test_upgrade_from_0001_adds_the_change_feed_objects(pg_empty_url: str) -> None:
    cat = Catalog(pg_empty_url)
    try:
        cat.create_schema()
        with cat.engine.begin() as conn:  # what 0001 left on a database made before 0002j
            conn.execute(sa.text("DROP TABLE item_tombstone"))
            for name in ("knowledge_item_base_updated_idx", "job_queue_updated_idx"):
                conn.execute(sa.text(f"DROP INDEX {name}"))
            conn.execute(sa.text("DROP INDEX job_finished_idx"))
            conn.execute(sa.text("UPDATE alembic_version SET version_num = '0001'"))
        cat.create_schema()
        inspector = sa.inspect(cat.engine)
        assert inspector.has_table("item_tombstone")
        assert "job_queue_updated_idx" in {i["name"] for i in inspector.get_indexes("job")}
    finally:
        cat.dispose()


def test_create_schema_on_an_empty_database_is_idempotent(pg_empty_url: str) -> None:
    cat = Catalog(pg_empty_url)
    try:
        assert cat.engine.dialect.name == "postgresql"
        cat.create_schema()
        cat.create_schema()  # already at head: nothing to do, no error
        inspector = sa.inspect(cat.engine)
        tables = set(inspector.get_table_names())
        assert {t.name for t in metadata.sorted_tables} | {"alembic_version"} <= tables
        checks = {c["name"] for c in inspector.get_check_constraints("knowledge_item")}
        assert {"knowledge_item_error_check", "knowledge_item_type_status_check"} <= checks
        fks = {fk["name"]: fk for fk in inspector.get_foreign_keys("knowledge_item")}
        assert fks["knowledge_item_group_fk"]["options"].get("ondelete") == "CASCADE"
        with cat.read() as conn:
            head = ScriptDirectory.from_config(alembic_config(cat.engine)).get_current_head()
            assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).all() == [
                (head,)
            ]
            server = conn.execute(sa.text("SHOW server_version")).scalar()
        assert server.startswith("18")
    finally:
        cat.dispose()


def test_concurrent_create_of_one_name_is_a_conflict(catalog):
    """READ COMMITTED: both transactions pass the name check; the loser must still get
    Conflict (not a raw IntegrityError) once the winner commits."""
    first = catalog.engine.connect()
    tx = first.begin()
    base_repo.insert(first, name="Same")
    outcome: list[BaseException | None] = []

    def second() -> None:
        try:
            with catalog.write_tx() as conn:
                base_repo.insert(conn, name="same")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=second)
    t.start()
    t.join(0.5)  # blocked on the unique index until the first commits
    tx.commit()
    first.close()
    t.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], Conflict), outcome
    with catalog.read() as conn:
        assert [b.name for b in base_repo.list_all(conn)] == ["Same"]
