"""Job listings are newest first or paged to the end; retention prunes whole terminal trees."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from knowbase.catalog.db import Catalog
from knowbase.catalog.schema import job as job_t
from knowbase.clock import ManualClock
from knowbase.errors import NotFound
from knowbase.jobs.manager import JobManager
from knowbase.jobs.model import JobKind
from knowbase.jobs.retry import Decision

pytestmark = pytest.mark.timeout(60)

KIND = JobKind("test.echo", 3, 1, 30, 600, "abandon")
DAY = 86_400


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    cat = Catalog(f"sqlite:///{tmp_path}/catalog.sqlite")
    cat.create_schema()
    yield cat
    cat.dispose()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def manager(catalog: Catalog, clock: ManualClock) -> JobManager:
    m = JobManager(catalog, clock=clock)
    m.register(KIND, lambda ctx: None)
    return m


def enqueue_many(m: JobManager, n: int, queue: str = "base.a", **kw) -> list[str]:  # type: ignore[no-untyped-def]
    with m.catalog.write_tx() as conn:
        return [
            m.enqueuer.enqueue(conn, KIND.name, {"i": i}, queue=queue, **kw).id for i in range(n)
        ]


def finish(m: JobManager, job_id: str) -> None:
    """End one job ``completed`` the way the worker does (claim, then finish), leaving every
    other job as it was."""
    now = m._ms()
    with m.catalog.write_tx() as conn:
        conn.execute(
            sa.update(job_t)
            .where(job_t.c.id == job_id)
            .values(status="running", locked_by="w", attempts=1, lease_until=now + 30_000)
        )
    job = m.queries.get(job_id)
    assert job is not None and m.attempts.finish(job, "w", Decision("completed")) is not None


def test_list_is_newest_first_and_pages_to_the_end(manager: JobManager) -> None:
    ids = enqueue_many(manager, 2_500)  # same millisecond on the fake clock: ids order them
    newest = manager.queries.list_jobs(queue="base.a", limit=1_000)
    assert [j.id for j in newest] == ids[::-1][:1_000]
    assert ids[-1] == newest[0].id  # the 2,500th job is on the first page
    seen: list[str] = []
    before = None
    while page := manager.queries.list_jobs(queue="base.a", limit=700, before=before):
        seen.extend(j.id for j in page)
        before = page[-1].id
    assert seen == ids[::-1]
    with pytest.raises(NotFound):
        manager.queries.list_jobs(before="no-such-job")


def test_iter_and_count_see_every_job(manager: JobManager) -> None:
    ids = enqueue_many(manager, 1_234)
    enqueue_many(manager, 5, queue="base.b")
    assert [j.id for j in manager.queries.iter_jobs(queue="base.a", page=100)] == ids
    rows = list(manager.queries.iter_jobs(queue="base.a", columns=[job_t.c.payload], page=1_000))
    assert [r.id for r in rows] == ids and rows[0].payload == '{"i": 0}'
    assert manager.queries.count_jobs(queue="base.a") == 1_234
    assert manager.queries.count_jobs(statuses=["pending"]) == 1_239
    assert manager.queries.count_jobs(statuses=["running"]) == 0


def test_cancel_queue_cancels_every_active_job(manager: JobManager) -> None:
    ids = enqueue_many(manager, 1_205)
    other = enqueue_many(manager, 3, queue="base.b")
    assert manager.cancels.cancel_queue("base.a", page=500) == 1_205
    assert manager.queries.count_jobs(queue="base.a", statuses=["pending", "running"]) == 0
    assert {j.status for j in manager.queries.get_many(ids).values()} == {"cancelled"}
    assert {j.status for j in manager.queries.get_many(other).values()} == {"pending"}


def tree(m: JobManager, queue: str = "base.a") -> tuple[str, list[str]]:
    root = m.enqueuer.enqueue_now(KIND.name, {}, queue=queue)
    kids = [
        m.enqueuer.enqueue_now(KIND.name, {"k": i}, queue=queue, parent_id=root.id)
        for i in range(2)
    ]
    grandchild = m.enqueuer.enqueue_now(KIND.name, {}, queue=queue, parent_id=kids[0].id)
    return root.id, [k.id for k in kids] + [grandchild.id]


def test_prune_removes_only_whole_old_terminal_trees(
    manager: JobManager, clock: ManualClock
) -> None:
    old_root, old_kids = tree(manager)
    live_root, live_kids = tree(manager)
    for job_id in [old_root, *old_kids, live_root, *live_kids[:2]]:
        finish(manager, job_id)
    # live tree: root and a child done long ago, a grandchild still pending → all kept
    clock.advance(15 * DAY)
    recent_root, recent_kids = tree(manager)
    for job_id in [recent_root, *recent_kids]:
        finish(manager, job_id)
    pruned = manager.queries.prune_terminal(retention_s=14 * DAY)
    assert pruned == 4
    left = {j.id for j in manager.queries.iter_jobs()}
    assert left == {live_root, *live_kids, recent_root, *recent_kids}
    # once the last job of the live tree ends (and ages), the whole tree goes
    finish(manager, live_kids[2])
    assert manager.queries.prune_terminal(retention_s=14 * DAY) == 0  # just finished
    clock.advance(15 * DAY)
    assert manager.queries.prune_terminal(retention_s=14 * DAY) == 8
    assert list(manager.queries.iter_jobs()) == []


def test_prune_is_throttled_and_can_be_off(manager: JobManager, clock: ManualClock) -> None:
    root, kids = tree(manager)
    for job_id in [root, *kids]:
        finish(manager, job_id)
    clock.advance(30 * DAY)
    assert manager.queries.prune_terminal(retention_s=0) == 0  # retention off: keep everything
    assert manager.queries.prune_terminal(retention_s=DAY, min_interval_s=10 * DAY) == 4
    again = manager.enqueuer.enqueue_now(KIND.name, {}, queue="base.a").id
    finish(manager, again)
    clock.advance(2 * DAY)  # old enough, but the last run was only 2 days ago
    assert manager.queries.prune_terminal(retention_s=DAY, min_interval_s=10 * DAY) == 0
    assert manager.queries.count_jobs() == 1
    clock.advance(9 * DAY)
    assert manager.queries.prune_terminal(retention_s=DAY, min_interval_s=10 * DAY) == 1


def test_prune_treats_a_job_whose_parent_is_gone_as_a_root(
    manager: JobManager, catalog: Catalog, clock: ManualClock
) -> None:
    root, kids = tree(manager)
    for job_id in [root, *kids]:
        finish(manager, job_id)
    with catalog.write_tx() as conn:  # a catalog from before trees were pruned whole
        conn.execute(sa.delete(job_t).where(job_t.c.id == root))
    clock.advance(15 * DAY)
    assert manager.queries.prune_terminal(retention_s=14 * DAY) == 3
