"""Migration 0008k: the ``api_key`` table and ``job.by_key``/``job.by_surface``. Down and up
again on SQLite and PostgreSQL, with a job made before (no key) and a key made after."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from knowbase.catalog import keys
from knowbase.catalog.db import Catalog
from knowbase.catalog.migrate import HEAD_REVISION, alembic_config
from knowbase.clock import ManualClock
from knowbase.jobs.actor import Actor, acting
from knowbase.jobs.manager import JobManager
from knowbase.jobs.model import JobKind

pytestmark = pytest.mark.timeout(120)

KIND = JobKind("test.kind", 3, 1, 30, 600, "retry")


@pytest.fixture
def catalog(empty_catalog: Catalog) -> Catalog:  # SQLite, and PostgreSQL (slow)
    return empty_catalog


def _has(cat: Catalog) -> tuple[bool, set[str]]:
    with cat.engine.connect() as conn:
        inspector = sa.inspect(conn)
        return inspector.has_table("api_key"), {c["name"] for c in inspector.get_columns("job")}


def test_down_and_up_again(catalog: Catalog) -> None:
    catalog.create_schema()
    assert HEAD_REVISION == "0009b"  # 0008k and the revisions after it
    command.downgrade(alembic_config(catalog.engine), "0007p")  # a catalog made before keys
    table, columns = _has(catalog)
    assert not table and not {"by_key", "by_surface"} & columns
    jobs = JobManager(catalog, clock=ManualClock())
    jobs.register(KIND, lambda ctx: None)
    with catalog.write_tx() as conn:  # a job row of the old shape
        conn.execute(
            sa.text(
                "INSERT INTO job (id, kind, queue, payload, status, attempts, max_attempts,"
                " run_at, cancel_requested, created_at, updated_at)"
                " VALUES ('old', 'test.kind', 'q', '{}', 'pending', 0, 3, 0, false, 1, 1)"
            )
        )
    catalog.create_schema()  # to head
    table, columns = _has(catalog)
    assert table and {"by_key", "by_surface"} <= columns
    old = jobs.queries.get("old")
    assert old is not None and old.by_key is None and old.by_surface is None
    with acting(Actor("ci", "http")):
        new = jobs.enqueuer.enqueue_now(KIND.name, {}, queue="q")
    assert (new.by_key, new.by_surface) == ("ci", "http")
    with catalog.write_tx() as conn:
        key, token = keys.create(
            conn, "ci", access="read", base_ids=None, expires_at=None, now_ms=1
        )
    with catalog.read() as conn:
        assert keys.find(conn, token) == key
