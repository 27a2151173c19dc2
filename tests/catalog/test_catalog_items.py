"""Item status rules, CHECKs and the container roll-up of §1.3, on every catalog backend
(a SQLite file, the embedded PostgreSQL server: ``backend_catalog``)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.db import Catalog
from knowbase.catalog.schema import knowledge_item
from knowbase.errors import Conflict, InvalidInput


@pytest.fixture
def catalog(backend_catalog: Catalog) -> Catalog:
    return backend_catalog


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


def test_a_folders_own_failure_outlives_a_late_rollup_of_no_children(catalog, base):
    """A folder whose expansion failed took back the children it wrote; a child's index job
    that still rolls the folder up (it read the child before the take-back) must not report
    the empty folder completed. Its parent is still re-derived."""
    root, sub, a, b = _tree(catalog, base)
    with catalog.write_tx() as conn:
        item_repo.set_status(conn, b.id, "completed")
        item_repo.fail_items(conn, [sub.id], "permission_denied", "could not copy a file")
        item_repo.delete_rows(conn, [a.id])  # the take-back
        item_repo.reconcile_containers(conn, sub.id)  # the late roll-up
    s = _status(catalog, sub.id)
    assert (s.status, s.error_code) == ("failed", "permission_denied")
    r = _status(catalog, root.id)
    assert (r.status, r.error_code) == ("failed", "child_failed")


def test_a_child_failed_folder_whose_children_are_gone_is_completed(catalog, base):
    root, sub, a, b = _tree(catalog, base)
    with catalog.write_tx() as conn:
        item_repo.set_status(conn, a.id, "failed", error_code="unreadable_file", error_message="x")
        assert (_status_in(conn, sub.id).status, _status_in(conn, sub.id).error_code) == (
            "failed",
            "child_failed",
        )
        item_repo.delete_rows(conn, [a.id])
        item_repo.reconcile_containers(conn, sub.id)
    assert _status(catalog, sub.id).status == "completed"


def _status_in(conn, item_id):
    return item_repo.get(conn, item_id)


def test_preparing_container_skipped_but_parent_visited(catalog, base):
    root, sub, a, b = _tree(catalog, base)
    with catalog.write_tx() as conn:
        item_repo.set_statuses_raw(conn, [sub.id], "preparing")
        item_repo.set_status(conn, b.id, "completed")
        item_repo.set_status(conn, a.id, "completed")
    assert _status(catalog, sub.id).status == "preparing"
    assert _status(catalog, root.id).status == "processing"  # sub is still preparing


def test_nothing_leaves_deleting(catalog, base):
    root, sub, a, b = _tree(catalog, base)
    with catalog.write_tx() as conn:
        ids = item_repo.mark_deleting(conn, [root.id])
        assert set(ids) == {root.id, sub.id, a.id, b.id}
        assert item_repo.set_status(conn, a.id, "completed") is False
        assert item_repo.fail_items(conn, ids, "x", "y") == []
    assert {_status(catalog, i).status for i in ids} == {"deleting"}


def test_failed_needs_error_and_others_must_not_have_one(catalog, base):
    with catalog.write_tx() as conn:
        f = item_repo.insert_active(conn, base_id=base.id, type="file", data={"source": "x"})
    with pytest.raises(sa.exc.IntegrityError), catalog.write_tx() as conn:
        conn.execute(
            knowledge_item.update().where(knowledge_item.c.id == f.id).values(status="failed")
        )
    with pytest.raises(sa.exc.IntegrityError), catalog.write_tx() as conn:
        conn.execute(
            knowledge_item.update().where(knowledge_item.c.id == f.id).values(error_code="x")
        )


def test_type_status_check(catalog, base):
    with catalog.write_tx() as conn:
        f = item_repo.insert_active(conn, base_id=base.id, type="file", data={"source": "x"})
        d = item_repo.insert_active(conn, base_id=base.id, type="directory", data={"source": "/d"})
    with pytest.raises(sa.exc.IntegrityError), catalog.write_tx() as conn:
        conn.execute(
            knowledge_item.update().where(knowledge_item.c.id == f.id).values(status="preparing")
        )
    with pytest.raises(sa.exc.IntegrityError), catalog.write_tx() as conn:
        conn.execute(
            knowledge_item.update().where(knowledge_item.c.id == d.id).values(status="reading")
        )


def test_delete_cascades_to_descendants(catalog, base):
    root, sub, a, b = _tree(catalog, base)
    with catalog.write_tx() as conn:
        item_repo.delete_rows(conn, [root.id])
    with catalog.read() as conn:
        assert item_repo.list_items(conn, base.id, include_deleting=True) == []


def test_base_delete_cascades_items(catalog, base):
    _tree(catalog, base)
    with catalog.write_tx() as conn:
        base_repo.delete(conn, base.id)
    with catalog.read() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(knowledge_item)).scalar() == 0


def test_deleting_roots(catalog, base):
    root, sub, a, b = _tree(catalog, base)
    with catalog.write_tx() as conn:
        item_repo.mark_deleting(conn, [sub.id, b.id])
        found = {i.id for i in item_repo.deleting_roots(conn)}
    assert found == {sub.id, b.id}


def test_item_ids_are_time_ordered_uuid7(catalog, base):
    import uuid

    with catalog.write_tx() as conn:
        ids = [
            item_repo.insert_active(conn, base_id=base.id, type="note", data={"source": "n"}).id
            for _ in range(3)
        ]
    assert all(uuid.UUID(i).version == 7 for i in ids)
    assert uuid.UUID(base.id).version == 4


def test_base_rules(catalog):
    with catalog.write_tx() as conn:
        base_repo.insert(conn, name="Docs")
    with pytest.raises(Conflict), catalog.write_tx() as conn:
        base_repo.insert(conn, name="  docs ")
    for bad in (
        {"chunk_size": 10, "chunk_overlap": 10},
        {"threshold": 2.0},
        {"chunk_strategy": "x"},
        {"file_processor_id": "magic"},
    ):
        with pytest.raises(InvalidInput), catalog.write_tx() as conn:
            base_repo.insert(conn, name="other", **bad)
    with pytest.raises(InvalidInput), catalog.write_tx() as conn:
        base_repo.insert(conn, name="   ")


def test_base_model_and_dims_check(catalog):
    from knowbase.catalog.schema import knowledge_base

    with catalog.write_tx() as conn:
        b = base_repo.insert(conn, name="m")
    with pytest.raises(sa.exc.IntegrityError), catalog.write_tx() as conn:
        conn.execute(
            knowledge_base.update()
            .where(knowledge_base.c.id == b.id)
            .values(embedding_model_id="x")
        )
    with pytest.raises(sa.exc.IntegrityError), catalog.write_tx() as conn:
        conn.execute(
            knowledge_base.update().where(knowledge_base.c.id == b.id).values(status="failed")
        )


def test_schema_is_portable_to_postgresql():
    """Every table compiles for PostgreSQL (no SQLite-only SQL in the catalog)."""
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.schema import CreateTable

    from knowbase.catalog.schema import metadata

    for table in metadata.sorted_tables:
        ddl = str(CreateTable(table).compile(dialect=postgresql.dialect()))
        assert "AUTOINCREMENT" not in ddl


def test_advance_active_moves_only_active_items(catalog, base):
    root, sub, a, b = _tree(catalog, base)
    with catalog.write_tx() as conn:
        assert item_repo.advance_active(conn, a.id, "reading") is True
        assert item_repo.advance_active(conn, a.id, "embedding") is True
        item_repo.set_status(conn, b.id, "completed")
        assert item_repo.advance_active(conn, b.id, "reading") is False  # not active
        assert item_repo.advance_active(conn, "no-such-id", "reading") is False
        with pytest.raises(ValueError):
            item_repo.advance_active(conn, a.id, "completed")
    assert _status(catalog, a.id).status == "embedding"
    assert _status(catalog, b.id).status == "completed"
    assert _status(catalog, root.id).status == "processing"  # a is still active
    with catalog.write_tx() as conn:
        item_repo.mark_deleting(conn, [a.id])
        assert item_repo.advance_active(conn, a.id, "reading") is False  # never out of deleting
    assert _status(catalog, a.id).status == "deleting"


def test_insert_active_many_returns_the_rows_it_wrote(catalog, base):
    root, sub, a, b = _tree(catalog, base)
    with catalog.write_tx() as conn:
        made = item_repo.insert_active_many(
            conn,
            base_id=base.id,
            type="file",
            rows=[(sub.id, f"/o/{i}", {"source": f"/o/{i}", "relative_path": f"r/s/{i}.md"})
                  for i in range(3)],
        )  # fmt: skip
    assert [m.status for m in made] == ["processing"] * 3
    assert made == [_status(catalog, m.id) for m in made]


def test_group_fk_needs_a_parent_in_the_same_base(catalog, base):
    with catalog.write_tx() as conn:
        other = base_repo.insert(conn, name="other")
        d = item_repo.insert_active(conn, base_id=base.id, type="directory", data={"source": "/d"})
    with pytest.raises(sa.exc.IntegrityError), catalog.write_tx() as conn:
        item_repo.insert_active(
            conn, base_id=other.id, type="file", data={"source": "x"}, group_id=d.id
        )
