"""The catalog on a real PostgreSQL 18: Alembic schema, CHECKs, FK cascades, the roll-up."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.db import Catalog
from knowbase.catalog.migrate import alembic_config
from knowbase.catalog.schema import knowledge_base, knowledge_item, metadata
from knowbase.errors import Conflict, InvalidInput

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def catalog(pg_url: str):
    c = Catalog(pg_url)
    yield c
    c.dispose()


@pytest.fixture
def base(catalog):
    with catalog.write_tx() as conn:
        return base_repo.insert(conn, name="docs")


def _tree(catalog, base):
    """root dir → (sub dir → leaf a), leaf b."""
    with catalog.write_tx() as conn:
        root = item_repo.insert_active(
            conn, base_id=base.id, type="directory", data={"source": "/r"}
        )
        sub = item_repo.insert_active(
            conn, base_id=base.id, type="directory", data={"source": "/r/s"}, group_id=root.id
        )
        a = item_repo.insert_active(
            conn,
            base_id=base.id,
            type="file",
            data={"source": "a", "relative_path": "r/s/a.md"},
            group_id=sub.id,
        )
        b = item_repo.insert_active(
            conn,
            base_id=base.id,
            type="file",
            data={"source": "b", "relative_path": "r/b.md"},
            group_id=root.id,
        )
        item_repo.set_statuses_raw(conn, [root.id, sub.id], "processing")
    return root, sub, a, b


def _status(catalog, item_id):
    with catalog.read() as conn:
        return item_repo.get(conn, item_id)


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


def test_first_states(catalog, base):
    with catalog.write_tx() as conn:
        d = item_repo.insert_active(conn, base_id=base.id, type="directory", data={"source": "/x"})
        f = item_repo.insert_active(conn, base_id=base.id, type="file", data={"source": "x"})
    assert d.status == "preparing"
    assert f.status == "processing"


def test_rollup_completed_and_failed(catalog, base):
    root, sub, a, b = _tree(catalog, base)
    with catalog.write_tx() as conn:
        item_repo.set_status(conn, a.id, "completed")
    assert _status(catalog, sub.id).status == "completed"
    assert _status(catalog, root.id).status == "processing"  # b still active
    with catalog.write_tx() as conn:
        item_repo.set_status(conn, b.id, "failed", error_code="unreadable_file", error_message="x")
    r = _status(catalog, root.id)
    assert (r.status, r.error_code, r.error_message) == (
        "failed",
        "child_failed",
        "One or more child items failed",
    )


def test_rollup_ignores_deleting_children(catalog, base):
    root, sub, a, b = _tree(catalog, base)
    with catalog.write_tx() as conn:
        item_repo.set_status(conn, a.id, "completed")
        item_repo.mark_deleting(conn, [b.id])
        item_repo.reconcile_containers(conn, root.id)
    assert _status(catalog, root.id).status == "completed"


def test_nothing_leaves_deleting(catalog, base):
    root, sub, a, b = _tree(catalog, base)
    with catalog.write_tx() as conn:
        ids = item_repo.mark_deleting(conn, [root.id])
        assert set(ids) == {root.id, sub.id, a.id, b.id}
        assert item_repo.set_status(conn, a.id, "completed") is False
        assert item_repo.fail_items(conn, ids, "x", "y") == []
        found = {i.id for i in item_repo.deleting_roots(conn)}
    assert found == {root.id}
    assert {_status(catalog, i).status for i in ids} == {"deleting"}


def test_item_checks(catalog, base):
    with catalog.write_tx() as conn:
        f = item_repo.insert_active(conn, base_id=base.id, type="file", data={"source": "x"})
        d = item_repo.insert_active(conn, base_id=base.id, type="directory", data={"source": "/d"})
    for item_id, values in (
        (f.id, {"status": "failed"}),  # failed needs an error
        (f.id, {"error_code": "x"}),  # only failed may carry one
        (f.id, {"status": "preparing"}),  # leaves never prepare
        (d.id, {"status": "reading"}),  # containers never read
        (f.id, {"type": "webpage"}),
    ):
        with pytest.raises(sa.exc.IntegrityError), catalog.write_tx() as conn:
            conn.execute(
                knowledge_item.update().where(knowledge_item.c.id == item_id).values(**values)
            )
    assert _status(catalog, f.id).status == "processing"  # every failed tx rolled back


def test_group_fk_needs_a_parent_in_the_same_base(catalog, base):
    with catalog.write_tx() as conn:
        other = base_repo.insert(conn, name="other")
        d = item_repo.insert_active(conn, base_id=base.id, type="directory", data={"source": "/d"})
    with pytest.raises(sa.exc.IntegrityError), catalog.write_tx() as conn:
        item_repo.insert_active(
            conn, base_id=other.id, type="file", data={"source": "x"}, group_id=d.id
        )


def test_delete_cascades_to_descendants_and_base_delete_cascades_items(catalog, base):
    root, sub, a, b = _tree(catalog, base)
    with catalog.write_tx() as conn:
        item_repo.delete_rows(conn, [sub.id])
    with catalog.read() as conn:
        left = {i.id for i in item_repo.list_items(conn, base.id, include_deleting=True)}
    assert left == {root.id, b.id}
    with catalog.write_tx() as conn:
        base_repo.delete(conn, base.id)
    with catalog.read() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(knowledge_item)).scalar() == 0


def test_base_rules_and_checks(catalog):
    with catalog.write_tx() as conn:
        b = base_repo.insert(conn, name="Docs")
    with pytest.raises(Conflict), catalog.write_tx() as conn:
        base_repo.insert(conn, name="  docs ")
    for bad in ({"chunk_size": 10, "chunk_overlap": 10}, {"threshold": 2.0}):
        with pytest.raises(InvalidInput), catalog.write_tx() as conn:
            base_repo.insert(conn, name="other", **bad)
    for values in (
        {"embedding_model_id": "x"},  # a model needs dimensions
        {"status": "failed"},  # failed needs an error
        {"chunk_overlap": 5000},
        {"allow_local_urls": None},
    ):
        with pytest.raises(sa.exc.IntegrityError), catalog.write_tx() as conn:
            conn.execute(
                knowledge_base.update().where(knowledge_base.c.id == b.id).values(**values)
            )
    with catalog.read() as conn:
        got = base_repo.get(conn, b.id)
    assert (got.status, got.allow_local_urls) == ("completed", False)


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
