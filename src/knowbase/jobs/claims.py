"""Claiming due jobs for a worker, under the per-queue and global running caps (spec §5).

One write transaction reads the running counts, picks due pending jobs in claim order a page at a
time and moves them to ``running`` under a lease; on PostgreSQL an advisory lock serialises
claims, so the counts the caps rely on are consistent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog.db import Catalog, unindexed
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
        running per queue and ``global_concurrency`` in all (counted over every worker).
        A kind registered with a batch handler brings its batch-mates (:meth:`claim_groups`)."""
        return [
            job
            for group in self.claim_groups(worker_id, queues=queues, limit=limit)
            for job in group
        ]

    def claim_groups(
        self,
        worker_id: str,
        *,
        queues: Iterable[str] | None = None,
        limit: int = 1,
        batch_room: Mapping[str, int] | None = None,
    ) -> list[list[Job]]:
        """Like :meth:`claim`, in up to ``limit`` attempt groups: a job of a kind registered
        with ``batch_max > 1`` leads a group that takes up to ``batch_max - 1`` further due
        jobs of its kind and queue, in claim order, in the same transaction. The caps count
        such a kind's running jobs in whole batches (one group is one slot), so batching
        never shrinks what a queue may run; every other job is a group of its own.
        ``batch_room``: how many new batches of each batched kind the caller may start."""
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
            running: dict[str, int] = {}
            for queue, kind, n in conn.execute(
                sa.select(job_t.c.queue, job_t.c.kind, sa.func.count())
                .where(job_t.c.status == "running")
                .group_by(job_t.c.queue, job_t.c.kind)
            ).all():
                size = self.registry.batch_max(kind)
                running[queue] = running.get(queue, 0) + -(-n // size)
            room = min(limit, self.global_concurrency - sum(running.values()))
            if room <= 0:
                return []
            groups = self._pick_due(
                conn, now, kinds, queue_list, running, room, dict(batch_room or {})
            )
            if not groups:
                return []
            picked = [job_id for group in groups for job_id in group]
            rows: list = []
            for part in range(0, len(picked), 500):  # bound the IN list
                rows += conn.execute(
                    sa.update(job_t)
                    .where(
                        job_t.c.id.in_(picked[part : part + 500]),
                        unindexed(job_t.c.status) == "pending",
                    )
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
        claimed = [[by_id[i] for i in group if i in by_id] for group in groups]
        return [group for group in claimed if group]

    def _pick_due(
        self,
        conn: Connection,
        now: int,
        kinds: list[str],
        queue_list: list[str] | None,
        running: dict[str, int],
        room: int,
        batch_room: dict[str, int],
    ) -> list[list[str]]:
        """Ids of due pending jobs in up to ``room`` groups, oldest first, each queue taking
        no more than its free running slots. Reads pending jobs in claim order a page at a
        time and stops once it has enough: ranking every pending job per claim (a window over
        the queue) made a 100k-file import's claims cost the size of its backlog."""
        free = {q: self.queue_concurrency - n for q, n in running.items()}
        order = (job_t.c.run_at, job_t.c.created_at, job_t.c.id)
        due = sa.select(*order, job_t.c.queue, job_t.c.kind).where(
            job_t.c.status == "pending", job_t.c.run_at <= now, job_t.c.kind.in_(kinds)
        )
        if queue_list is not None:
            due = due.where(job_t.c.queue.in_(queue_list))
        groups: list[list[str]] = []
        filling: dict[tuple[str, str], tuple[list[str], int]] = {}  # open batches
        after: tuple[int, int, str] | None = None
        while True:
            page_q = due if after is None else due.where(sa.tuple_(*order) > after)
            # Rows no later row can use are left in SQLite: a full queue's backlog would
            # otherwise be read into Python on every claim (260 ms at 100k pending jobs).
            spent_queues, spent_kinds = _spent(free, batch_room, filling, len(groups) >= room)
            if spent_queues:
                page_q = page_q.where(job_t.c.queue.notin_(sorted(spent_queues)))
            if spent_kinds:
                page_q = page_q.where(job_t.c.kind.notin_(sorted(spent_kinds)))
            page = conn.execute(page_q.order_by(*order).limit(CLAIM_PAGE)).all()
            for _run_at, _created_at, job_id, queue, kind in page:
                open_group = filling.get((queue, kind))
                if open_group is not None and len(open_group[0]) < open_group[1]:
                    open_group[0].append(job_id)  # a batch-mate: no slot of its own
                elif (
                    len(groups) < room
                    and free.setdefault(queue, self.queue_concurrency) > 0
                    and batch_room.get(kind, 1) > 0
                ):
                    free[queue] -= 1
                    group = [job_id]
                    groups.append(group)
                    size = self.registry.batch_max(kind)
                    if size > 1:
                        filling[(queue, kind)] = (group, size)
                        if kind in batch_room:
                            batch_room[kind] -= 1
                if len(groups) >= room and all(len(g) >= n for g, n in filling.values()):
                    return groups
            # A full claim stops at its page's end: batches fill from what it read, so a
            # claim never scans the backlog for batch-mates.
            if len(page) < CLAIM_PAGE or len(groups) >= room:
                return groups
            after = (page[-1][0], page[-1][1], page[-1][2])


def _spent(
    free: Mapping[str, int],
    batch_room: Mapping[str, int],
    filling: Mapping[tuple[str, str], tuple[list[str], int]],
    room_full: bool,
) -> tuple[set[str], set[str]]:
    """Queues and kinds whose further due jobs a claim can no longer take: no free slot (or
    no batch room, or no room at all) and no open batch of theirs with space. Both only grow
    during a claim, so leaving such rows unread never changes what it picks."""
    open_queues = {q for (q, _k), (group, size) in filling.items() if len(group) < size}
    open_kinds = {k for (_q, k), (group, size) in filling.items() if len(group) < size}
    if room_full:
        return set(free) - open_queues, set()
    queues = {q for q, n in free.items() if n <= 0} - open_queues
    kinds = {k for k, n in batch_room.items() if n <= 0} - open_kinds
    return queues, kinds


__all__ = ["CLAIM_PAGE", "GLOBAL_CONCURRENCY", "QUEUE_CONCURRENCY", "Claims"]
