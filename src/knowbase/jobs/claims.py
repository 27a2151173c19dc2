"""Claiming due jobs for a worker, under the per-queue and global running caps (spec §5).

One write transaction reads the running counts, picks due pending jobs in claim order (read per
(queue, kind) a page at a time, merged) and moves them to ``running`` under a lease; on
PostgreSQL an advisory lock serialises claims, so the counts the caps rely on are consistent.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping

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
        no more than its free running slots.

        Pending jobs are read per (queue, kind) in claim order, a page at a time, merged into
        one claim order; a pair whose further jobs the claim can no longer take is read no
        further. Ranking every pending job per claim, and later paging past a full queue's
        backlog, made each claim of a 100k-file import cost the size of its backlog (12 ms a
        page at 100k pending, the catalog's writer held)."""
        free = {q: self.queue_concurrency - n for q, n in running.items()}
        groups: list[list[str]] = []
        filling: dict[tuple[str, str], tuple[list[str], int]] = {}  # open batches

        def open_batch(queue: str, kind: str) -> list[str] | None:
            """This pair's batch of the claim while it has space for a batch-mate."""
            group, size = filling.get((queue, kind), (None, 0))
            return group if group is not None and len(group) < size else None

        def may_start(queue: str, kind: str) -> bool:
            """Whether a job of this pair may start a group: room, a free slot, batch room."""
            return (
                len(groups) < room
                and free.get(queue, self.queue_concurrency) > 0
                and batch_room.get(kind, 1) > 0
            )

        def takes(queue: str, kind: str) -> bool:
            """Whether a further job of this pair could join a batch or start a group."""
            return open_batch(queue, kind) is not None or may_start(queue, kind)

        pairs = [
            (queue, kind)
            for queue, kind in _pending_pairs(conn)
            if kind in kinds and (queue_list is None or queue in queue_list)
        ]
        streams = [_due_in_order(conn, now, queue, kind, takes) for queue, kind in pairs]
        for _run_at, _created_at, job_id, queue, kind in heapq.merge(*streams):
            batch = open_batch(queue, kind)
            if batch is not None:
                batch.append(job_id)  # a batch-mate: no slot of its own
            elif may_start(queue, kind):
                free[queue] = free.get(queue, self.queue_concurrency) - 1
                group = [job_id]
                groups.append(group)
                size = self.registry.batch_max(kind)
                if size > 1:
                    filling[(queue, kind)] = (group, size)
                    if kind in batch_room:
                        batch_room[kind] -= 1
            if len(groups) >= room and all(len(g) >= n for g, n in filling.values()):
                break
        return groups


_ORDER = (job_t.c.run_at, job_t.c.created_at, job_t.c.id)


def _pending_pairs(conn: Connection) -> list[tuple[str, str]]:
    """Every (queue, kind) with a pending job, one index seek each (``job_pending_pair_idx``
    leads with status, queue, kind): a skip over the index, never a read of the backlog.
    The next pair is sought as the next kind of the same queue, else the first of the next
    queue: SQLite seeks ``(queue, kind) > (?, ?)`` by its first column only and then walks
    the rest of that queue's jobs (15 ms at 100k pending)."""
    pairs: list[tuple[str, str]] = []
    pending = sa.select(job_t.c.queue, job_t.c.kind).where(job_t.c.status == "pending")
    step = pending
    while True:
        row = conn.execute(step.order_by(job_t.c.queue, job_t.c.kind).limit(1)).first()
        if row is None and pairs:  # no further kind in this queue: the next queue's first
            row = conn.execute(
                pending.where(job_t.c.queue > pairs[-1][0])
                .order_by(job_t.c.queue, job_t.c.kind)
                .limit(1)
            ).first()
        if row is None:
            return pairs
        pairs.append((row.queue, row.kind))
        step = pending.where(job_t.c.queue == row.queue, job_t.c.kind > row.kind)


def _due_in_order(
    conn: Connection, now: int, queue: str, kind: str, takes: Callable[[str, str], bool]
) -> Iterator[tuple[int, int, str, str, str]]:
    """Due pending jobs of one (queue, kind) in claim order, ``CLAIM_PAGE`` rows a query; the
    next page is read only while the claim ``takes`` more of them."""
    due = sa.select(*_ORDER, job_t.c.queue, job_t.c.kind).where(
        job_t.c.status == "pending",
        job_t.c.queue == queue,
        job_t.c.kind == kind,
        job_t.c.run_at <= now,
    )
    after: tuple[int, int, str] | None = None
    while takes(queue, kind):
        page_q = due if after is None else due.where(sa.tuple_(*_ORDER) > after)
        page = conn.execute(page_q.order_by(*_ORDER).limit(CLAIM_PAGE)).all()
        yield from (tuple(row) for row in page)  # type: ignore[misc]
        if len(page) < CLAIM_PAGE:
            return
        after = (page[-1][0], page[-1][1], page[-1][2])


__all__ = ["CLAIM_PAGE", "GLOBAL_CONCURRENCY", "QUEUE_CONCURRENCY", "Claims"]
