"""One claim carries a batch (issue 30 item 1): a batched kind's due jobs of one queue come in
groups of up to ``batch_max``, the caps count them in whole batches, and the caller's
``batch_room`` bounds how many batches start; every job keeps its own row and attempt. On
every catalog backend (``backend_catalog``: SQLite, PostgreSQL)."""

from __future__ import annotations

import pytest

from knowbase.catalog.db import Catalog
from knowbase.clock import ManualClock as FakeClock
from knowbase.jobs.manager import JobManager
from knowbase.jobs.model import JobKind

pytestmark = pytest.mark.timeout(60)

BATCHED = JobKind("test.batched", 3, 1, 30, 600, "retry")
SINGLE = JobKind("test.single", 3, 1, 30, 600, "retry")


def manager(catalog: Catalog, **caps: int) -> JobManager:
    m = JobManager(catalog, clock=FakeClock(), **caps)
    m.register(BATCHED, lambda ctx: None, batch_handler=lambda ctxs: {}, batch_max=4)
    m.register(SINGLE, lambda ctx: None)
    return m


def test_a_claim_groups_batch_mates_of_one_kind_and_queue(backend_catalog: Catalog) -> None:
    m = manager(backend_catalog)
    for _ in range(6):
        m.enqueue_now(BATCHED.name, {}, queue="base.a")
    m.enqueue_now(SINGLE.name, {}, queue="base.a")
    for _ in range(2):
        m.enqueue_now(BATCHED.name, {}, queue="base.b")
    groups = m.claim_groups("w1", limit=10)
    shapes = sorted((g[0].queue, g[0].kind, len(g)) for g in groups)
    assert shapes == [
        ("base.a", BATCHED.name, 2),
        ("base.a", BATCHED.name, 4),
        ("base.a", SINGLE.name, 1),
        ("base.b", BATCHED.name, 2),
    ]
    for group in groups:
        assert len({(j.queue, j.kind) for j in group}) == 1
        assert all((j.status, j.attempts, j.locked_by) == ("running", 1, "w1") for j in group)
    assert m.claim_groups("w2", limit=10) == []  # every job is claimed exactly once


def test_caps_count_batches_and_batch_room_bounds_them(backend_catalog: Catalog) -> None:
    m = manager(backend_catalog, queue_concurrency=2, global_concurrency=50)
    for _ in range(20):
        m.enqueue_now(BATCHED.name, {}, queue="base.a")
    first = m.claim_groups("w1", limit=10)
    # two slots of the queue, each a whole batch: 8 jobs running, not 2
    assert [len(g) for g in first] == [4, 4]
    assert m.claim_groups("w1", limit=10) == []
    m2 = manager(backend_catalog, queue_concurrency=10)
    roomy = m2.claim_groups("w2", limit=10, batch_room={BATCHED.name: 1})
    assert [len(g) for g in roomy] == [4]  # the caller may start one batch more
    assert m2.claim_groups("w2", limit=10, batch_room={BATCHED.name: 0}) == []


def test_claim_still_returns_a_flat_list(backend_catalog: Catalog) -> None:
    m = manager(backend_catalog)
    for _ in range(5):
        m.enqueue_now(BATCHED.name, {}, queue="base.a")
    jobs = m.claim("w1", limit=1)
    assert len(jobs) == 4  # one group of batch_max jobs


def test_a_full_queues_backlog_stays_unread_and_other_queues_still_claim(
    backend_catalog: Catalog,
) -> None:
    """A queue without free slots: its later jobs are left in the database, not paged through
    on every claim (a 100k-file import made each claim read its whole backlog), and a job of
    another queue behind that backlog is still found."""
    import sqlalchemy as sa

    from knowbase.jobs.claims import CLAIM_PAGE

    m = manager(backend_catalog, queue_concurrency=1)
    with backend_catalog.write_tx() as conn:
        m.enqueue_many(
            conn, BATCHED.name, [({"i": i}, None) for i in range(CLAIM_PAGE * 6)], queue="base.a"
        )
    late = m.enqueue_now(SINGLE.name, {}, queue="base.b")
    rows_read = []

    def count(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("SELECT") and "FROM job" in statement:
            rows_read.append(statement)

    sa.event.listen(backend_catalog.engine, "before_cursor_execute", count)
    try:
        groups = m.claim_groups("w1", limit=10)
    finally:
        sa.event.remove(backend_catalog.engine, "before_cursor_execute", count)
    assert sorted((g[0].queue, len(g)) for g in groups) == [("base.a", 4), ("base.b", 1)]
    assert late.id in {j.id for g in groups for j in g}
    # the running counts, the first page, one page past base.a's backlog: not six pages
    assert len(rows_read) <= 3, rows_read
