"""Migration 0007p: claims read pending jobs through ``job_pending_pair_idx`` (status, queue,
kind, run_at, created_at, id); 0005k's status-first ``job_pending_order_idx`` goes. Down and
up again on SQLite and PostgreSQL, with pending jobs that a claim still finds."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from knowbase.catalog.db import Catalog
from knowbase.catalog.migrate import alembic_config
from knowbase.clock import ManualClock
from knowbase.jobs.manager import JobManager
from knowbase.jobs.model import JobKind

pytestmark = pytest.mark.timeout(120)

KIND = JobKind("test.kind", 3, 1, 30, 600, "retry")


@pytest.fixture
def catalog(empty_catalog: Catalog) -> Catalog:  # SQLite, and PostgreSQL (slow)
    return empty_catalog


def _job_indexes(cat: Catalog) -> set[str]:
    with cat.engine.connect() as conn:
        return {i["name"] for i in sa.inspect(conn).get_indexes("job")}


def test_down_and_up_again(catalog: Catalog) -> None:
    catalog.create_schema()
    assert "job_pending_pair_idx" in _job_indexes(catalog)
    assert "job_pending_order_idx" not in _job_indexes(catalog)
    jobs = JobManager(catalog, clock=ManualClock())
    jobs.register(KIND, lambda ctx: None)
    for queue in ("base.a", "base.b"):
        jobs.enqueuer.enqueue_now(KIND.name, {}, queue=queue)
    command.downgrade(alembic_config(catalog.engine), "0006c")  # a catalog made before 0007p
    assert "job_pending_order_idx" in _job_indexes(catalog)
    assert "job_pending_pair_idx" not in _job_indexes(catalog)
    catalog.create_schema()  # to head
    assert "job_pending_pair_idx" in _job_indexes(catalog)
    assert "job_pending_order_idx" not in _job_indexes(catalog)
    assert sorted(j.queue for j in jobs.claims.claim("w", limit=5)) == ["base.a", "base.b"]
