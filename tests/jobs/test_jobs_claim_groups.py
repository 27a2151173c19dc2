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
        m.enqueuer.enqueue_now(BATCHED.name, {}, queue="base.a")
    m.enqueuer.enqueue_now(SINGLE.name, {}, queue="base.a")
    for _ in range(2):
        m.enqueuer.enqueue_now(BATCHED.name, {}, queue="base.b")
    groups = m.claims.claim_groups("w1", limit=10)
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
    assert m.claims.claim_groups("w2", limit=10) == []  # every job is claimed exactly once


def test_caps_count_batches_and_batch_room_bounds_them(backend_catalog: Catalog) -> None:
    m = manager(backend_catalog, queue_concurrency=2, global_concurrency=50)
    for _ in range(20):
        m.enqueuer.enqueue_now(BATCHED.name, {}, queue="base.a")
    first = m.claims.claim_groups("w1", limit=10)
    # two slots of the queue, each a whole batch: 8 jobs running, not 2
    assert [len(g) for g in first] == [4, 4]
    assert m.claims.claim_groups("w1", limit=10) == []
    m2 = manager(backend_catalog, queue_concurrency=10)
    roomy = m2.claims.claim_groups("w2", limit=10, batch_room={BATCHED.name: 1})
    assert [len(g) for g in roomy] == [4]  # the caller may start one batch more
    assert m2.claims.claim_groups("w2", limit=10, batch_room={BATCHED.name: 0}) == []


def test_claim_still_returns_a_flat_list(backend_catalog: Catalog) -> None:
    m = manager(backend_catalog)
    for _ in range(5):
        m.enqueuer.enqueue_now(BATCHED.name, {}, queue="base.a")
    jobs = m.claims.claim("w1", limit=1)
    assert len(jobs) == 4  # one group of batch_max jobs


def test_a_full_queues_backlog_stays_unread_and_other_queues_still_claim(
    backend_catalog: Catalog,
) -> None:
    """A queue without free slots: its later jobs are left in the database, not paged through
    on every claim (a 100k-file import made each claim read its whole backlog), and a job of
    another queue enqueued after that backlog is still found."""
    import sqlalchemy as sa

    from knowbase.jobs.claims import CLAIM_PAGE

    m = manager(backend_catalog, queue_concurrency=1)
    with backend_catalog.write_tx() as conn:
        m.enqueuer.enqueue_many(
            conn, BATCHED.name, [({"i": i}, None) for i in range(CLAIM_PAGE * 20)], queue="base.a"
        )
    late = m.enqueuer.enqueue_now(SINGLE.name, {}, queue="base.b")
    rows_read = []

    def count(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("SELECT") and "FROM job" in statement:
            rows_read.append(statement)

    sa.event.listen(backend_catalog.engine, "before_cursor_execute", count)
    try:
        groups = m.claims.claim_groups("w1", limit=10)
    finally:
        sa.event.remove(backend_catalog.engine, "before_cursor_execute", count)
    assert sorted((g[0].queue, len(g)) for g in groups) == [("base.a", 4), ("base.b", 1)]
    assert late.id in {j.id for g in groups for j in g}
    # the running counts, a seek per (queue, kind) pair, one page of each pair: a handful of
    # statements, never a page per CLAIM_PAGE jobs of base.a's backlog (20 pages)
    assert len(rows_read) <= 8, rows_read


def reference_claim(
    pending: list[tuple[float, float, str, str, str]],
    *,
    queue_cap: int,
    room: int,
    batch_max: dict[str, int],
    batch_room: dict[str, int],
) -> list[list[str]]:
    """The claim rule read straight from its definition: every due pending job in claim order
    (run_at, created_at, id); a job joins its (queue, kind)'s open batch while it has space,
    else starts a group if the claim has room, its queue a free slot and its kind batch room."""
    free: dict[str, int] = {}
    groups: list[list[str]] = []
    filling: dict[tuple[str, str], list[str]] = {}
    room_left = dict(batch_room)
    for _run_at, _created, job_id, queue, kind in sorted(pending):
        batch = filling.get((queue, kind))
        if batch is not None and len(batch) < batch_max.get(kind, 1):
            batch.append(job_id)
        elif (
            len(groups) < room
            and free.setdefault(queue, queue_cap) > 0
            and room_left.get(kind, 1) > 0
        ):
            free[queue] -= 1
            groups.append([job_id])
            if batch_max.get(kind, 1) > 1:
                filling[(queue, kind)] = groups[-1]
                if kind in room_left:
                    room_left[kind] -= 1
    return groups


@pytest.mark.parametrize("seed", range(6))
def test_a_claim_picks_what_the_claim_rule_picks(tmp_path, seed: int) -> None:
    """Jobs of several queues and kinds, due at different times, some not yet due: a claim,
    which reads each (queue, kind) on its own and merges them, takes exactly the groups the
    plain rule over the whole list takes."""
    import random

    from knowbase.clock import ManualClock

    rng = random.Random(seed)
    catalog = Catalog(f"sqlite:///{tmp_path}/catalog.sqlite")
    catalog.create_schema()
    clock = ManualClock()
    cap, room = rng.choice([1, 2, 3]), rng.choice([2, 5, 50])
    m = JobManager(catalog, clock=clock, queue_concurrency=cap, global_concurrency=50)
    m.register(BATCHED, lambda ctx: None, batch_handler=lambda ctxs: {}, batch_max=4)
    m.register(SINGLE, lambda ctx: None)
    made = []
    for _ in range(rng.randint(20, 400)):
        kind = rng.choice([BATCHED.name, BATCHED.name, SINGLE.name])
        queue = rng.choice(["base.a", "base.b", "base.c", "system"])
        made.append(
            m.enqueuer.enqueue_now(kind, {}, queue=queue, delay_s=rng.choice([0, 0, 0, 5, 60]))
        )
        clock.advance(rng.choice([0, 0.001, 1]))
    clock.advance(30)
    now = clock() * 1000
    batch_room = {BATCHED.name: rng.choice([0, 1, 2, 9])}
    want = reference_claim(
        [(j.run_at, j.created_at, j.id, j.queue, j.kind) for j in made if j.run_at <= now],
        queue_cap=cap,
        room=room,
        batch_max={BATCHED.name: 4},
        batch_room=batch_room,
    )
    got = m.claims.claim_groups("w", limit=room, batch_room=batch_room)
    catalog.dispose()
    assert [[j.id for j in g] for g in got] == want
