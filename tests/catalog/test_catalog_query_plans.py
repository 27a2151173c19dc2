"""A status test beside ``id IN (...)`` is served by the primary key, never by the status index.

SQLite without statistics guessed that ``status = ?`` matched ~10 rows and walked the status
index for ``id IN (64 ids) AND status IN (...)``: every pending row of a 100k-file import, per
statement (an index batch's ``reading`` step and a claim each cost 28 ms at 100k). These tests
run SQLite's own ``EXPLAIN QUERY PLAN`` on the very statements the repositories execute."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.db import Catalog
from knowbase.clock import ManualClock
from knowbase.jobs.manager import JobManager
from knowbase.jobs.model import JobKind

KIND = JobKind("test.batched", 3, 1, 30, 600, "retry")


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    catalog = Catalog(f"sqlite:///{tmp_path}/catalog.sqlite")
    catalog.create_schema()
    yield catalog
    catalog.dispose()


def plans_of_updates(catalog: Catalog, act: Callable[[], object]) -> list[str]:
    """SQLite's plan of each UPDATE that ``act`` executes, with its real parameters."""
    seen: list[tuple[str, object]] = []

    def record(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("UPDATE") and not executemany:
            seen.append((statement, parameters))

    sa.event.listen(catalog.engine, "before_cursor_execute", record)
    try:
        act()
    finally:
        sa.event.remove(catalog.engine, "before_cursor_execute", record)
    assert seen, "nothing was updated"
    plans = []
    with catalog.read() as conn:
        raw = conn.connection.driver_connection
        for statement, parameters in seen:
            rows = raw.execute(f"EXPLAIN QUERY PLAN {statement}", parameters).fetchall()
            plans.append(" / ".join(str(r[-1]) for r in rows))
    return plans


def by_primary_key(plan: str) -> bool:
    return "status_idx" not in plan and "autoindex" in plan


def test_advancing_a_batch_of_items_looks_them_up_by_id(catalog: Catalog) -> None:
    with catalog.write_tx() as conn:
        base = base_repo.insert(conn, name="docs")
        leaves = item_repo.insert_active_many(
            conn, base_id=base.id, type="file", rows=[(None, f"/f{i}", {}) for i in range(64)]
        )
    ids = [leaf.id for leaf in leaves]

    def advance() -> None:
        with catalog.write_tx() as conn:
            assert item_repo.advance_many(conn, ids, "reading") == set(ids)
            assert (
                item_repo.fail_items(conn, ids[:32], "x", "y", only_statuses=("reading",))
                == ids[:32]
            )

    plans = plans_of_updates(catalog, advance)
    assert all(by_primary_key(p) for p in plans), plans


def test_a_claim_moves_its_jobs_by_id(catalog: Catalog) -> None:
    jobs = JobManager(catalog, clock=ManualClock())
    jobs.register(KIND, lambda ctx: None, batch_handler=lambda ctxs: {}, batch_max=64)
    with catalog.write_tx() as conn:
        jobs.enqueuer.enqueue_many(
            conn, KIND.name, [({"i": i}, None) for i in range(200)], queue="q"
        )
    plans = plans_of_updates(catalog, lambda: jobs.claims.claim_groups("w", limit=1))
    assert all(by_primary_key(p) for p in plans), plans
    assert [len(g) for g in jobs.claims.claim_groups("w", limit=1)] == [64]


def test_cancelling_pending_jobs_finds_them_by_id(catalog: Catalog) -> None:
    jobs = JobManager(catalog, clock=ManualClock())
    jobs.register(KIND, lambda ctx: None)
    with catalog.write_tx() as conn:
        jobs.enqueuer.enqueue_many(
            conn, KIND.name, [({"i": i}, None) for i in range(50)], queue="q"
        )
    ids = [j.id for j in jobs.queries.list_jobs(queue="q")][:20]
    plans = plans_of_updates(catalog, lambda: jobs.cancels.request_cancel(ids))
    assert all(by_primary_key(p) for p in plans), plans
    assert {j.status for j in jobs.queries.list_jobs(queue="q") if j.id in ids} == {"cancelled"}
