"""Who is alive, by heartbeat (``kb status``'s workers list): every host's rows, the lease as
the cut-off, the running jobs each worker holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from knowbase.catalog.db import Catalog
from knowbase.clock import ManualClock
from knowbase.jobs import JobKind, JobManager
from knowbase.jobs.liveness import list_live_workers

pytestmark = pytest.mark.timeout(60)

KIND = JobKind("t.held", 3, 1, 30, 60, "abandon")


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    cat = Catalog(f"sqlite:///{tmp_path}/catalog.sqlite")
    cat.create_schema()
    yield cat
    cat.dispose()


def test_live_workers_with_host_heartbeat_age_and_jobs_held(catalog: Catalog) -> None:
    clock = ManualClock()
    manager = JobManager(catalog, clock=clock, lease_s=30)
    manager.register(KIND, lambda ctx: None)
    here, remote, stale = manager.worker_id, "build-2:4242:1000", "build-3:7:1000"
    manager.leases.register_worker(stale)
    clock.advance(31)  # stale's heartbeat is now older than the lease
    manager.leases.register_worker(here)
    manager.leases.register_worker(remote)
    for _ in range(3):
        manager.enqueuer.enqueue_now(KIND.name, {}, queue="q")
    assert len(manager.claims.claim(remote, limit=2)) == 2
    manager.claims.claim(here, limit=1)
    clock.advance(2.5)
    manager.leases.heartbeat(here, [])  # a fresh beat: age 0

    got = {w.id: w for w in list_live_workers(catalog, now=int(clock() * 1000), lease_s=30)}
    assert set(got) == {here, remote}
    assert (got[remote].host, got[remote].pid, got[remote].jobs_held) == ("build-2", 4242, 2)
    assert got[remote].heartbeat_age_s == 2.5
    assert (got[here].jobs_held, got[here].heartbeat_age_s) == (1, 0.0)
    assert got[here].to_dict()["host"] == here.rsplit(":", 2)[0]
