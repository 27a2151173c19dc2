"""Claiming due jobs for a worker, under the per-queue and global running caps (spec §5).

One write transaction reads the running counts, picks due pending jobs in claim order a page at a
time and moves them to ``running`` under a lease; on PostgreSQL an advisory lock serialises
claims, so the counts the caps rely on are consistent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog.db import Catalog
from knowbase.catalog.schema import job as job_t
from knowbase.jobs.model import Job
from knowbase.jobs.registry import JobRegistry

#: Spec §5: at most 5 running jobs per queue, 50 in all.
QUEUE_CONCURRENCY = 5
GLOBAL_CONCURRENCY = 50
CLAIM_PAGE = 256  # pending jobs a claim reads at a time, in claim order


class Claims:
    """Hands due pending jobs of registered kinds to workers."""

    def __init__(
        self,
        catalog: Catalog,
        registry: JobRegistry,
        ms: Callable[[], int],
        *,
        lease_s: float,
        queue_concurrency: int = QUEUE_CONCURRENCY,
        global_concurrency: int = GLOBAL_CONCURRENCY,
    ) -> None:
        self.catalog = catalog
        self.registry = registry
        self._ms = ms
        self.lease_s = lease_s
        self.queue_concurrency = queue_concurrency
        self.global_concurrency = global_concurrency

    def claim(
        self, worker_id: str, *, queues: Iterable[str] | None = None, limit: int = 1
    ) -> list[Job]:
        """Atomically move up to ``limit`` due pending jobs of registered kinds to ``running``
        for ``worker_id``, oldest ``run_at`` first, keeping at most ``queue_concurrency``
        running per queue and ``global_concurrency`` in all (counted over every worker)."""
        kinds = self.registry.names()
        if limit <= 0 or not kinds:
            return []
        queue_list = None if queues is None else list(queues)
        with self.catalog.write_tx() as conn:
            now = self._ms()
            if conn.dialect.name == "postgresql":
                # Caps need a consistent count of running jobs: serialise claims (the window
                # paged read below takes no FOR UPDATE SKIP LOCKED; the lock makes it needless).
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(7244211)"))
            running: dict[str, int] = dict(
                conn.execute(
                    sa.select(job_t.c.queue, sa.func.count())
                    .where(job_t.c.status == "running")
                    .group_by(job_t.c.queue)
                ).all()
            )
            room = min(limit, self.global_concurrency - sum(running.values()))
            if room <= 0:
                return []
            picked = self._pick_due(conn, now, kinds, queue_list, running, room)
            if not picked:
                return []
            rows = conn.execute(
                sa.update(job_t)
                .where(job_t.c.id.in_(picked), job_t.c.status == "pending")
                .values(
                    status="running",
                    locked_by=worker_id,
                    lease_until=now + int(self.lease_s * 1000),
                    attempts=job_t.c.attempts + 1,
                    updated_at=now,
                )
                .returning(*job_t.c)
            ).all()
        by_id = {r.id: Job.from_row(r) for r in rows}
        return [by_id[i] for i in picked if i in by_id]

    def _pick_due(
        self,
        conn: Connection,
        now: int,
        kinds: list[str],
        queue_list: list[str] | None,
        running: dict[str, int],
        room: int,
    ) -> list[str]:
        """Ids of up to ``room`` due pending jobs, oldest first, each queue taking no more than
        its free running slots. Reads pending jobs in claim order a page at a time and stops
        once it has enough: ranking every pending job per claim (a window over the queue)
        made a 100k-file import's claims cost the size of its backlog."""
        free = {q: self.queue_concurrency - n for q, n in running.items()}
        order = (job_t.c.run_at, job_t.c.created_at, job_t.c.id)
        due = sa.select(*order, job_t.c.queue).where(
            job_t.c.status == "pending", job_t.c.run_at <= now, job_t.c.kind.in_(kinds)
        )
        if queue_list is not None:
            due = due.where(job_t.c.queue.in_(queue_list))
        picked: list[str] = []
        after: tuple[int, int, str] | None = None
        while True:
            page_q = due if after is None else due.where(sa.tuple_(*order) > after)
            page = conn.execute(page_q.order_by(*order).limit(CLAIM_PAGE)).all()
            for _run_at, _created_at, job_id, queue in page:
                if free.setdefault(queue, self.queue_concurrency) > 0:
                    free[queue] -= 1
                    picked.append(job_id)
                    if len(picked) >= room:
                        return picked
            if len(page) < CLAIM_PAGE:
                return picked
            after = (page[-1][0], page[-1][1], page[-1][2])


__all__ = ["CLAIM_PAGE", "GLOBAL_CONCURRENCY", "QUEUE_CONCURRENCY", "Claims"]
