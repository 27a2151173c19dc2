"""Job reads and retention: a collaborator of :class:`~knowbase.jobs.manager.JobManager`.

Nothing here reads "the first N" and stops: listings are newest first with a cursor, and
whatever must see every matching job (cancel a base's jobs, the sweep's coverage) walks them in
pages by the ``(created_at, id)`` key, so the answer is right however many jobs a home holds.

Retention (:meth:`JobQueries.prune_terminal`) deletes *whole job trees* only: a tree (a root and
its descendants by ``parent_id``) goes once every job in it is terminal and the last of them
finished before the cutoff. A terminal child of a tree that is still running is kept, so
``Knowledge.wait``/``job_tree`` and the event stream always see a live tree complete, and a
terminal root whose children still run keeps them reachable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from knowbase.catalog.schema import TERMINAL_JOB_STATUSES
from knowbase.catalog.schema import job as job_t
from knowbase.errors import NotFound, Unavailable
from knowbase.jobs.model import Job
from knowbase.jobs.recovery import chunks

if TYPE_CHECKING:
    from knowbase.catalog.db import Catalog

PAGE = 500  # rows per page of an internal walk (well under SQLite's variable limit)
ACTIVE = ("pending", "running")


def _filtered(
    q: Any,
    *,
    queue: str | None,
    statuses: Iterable[str] | None,
    kind_prefix: str | None = None,
) -> Any:
    if queue is not None:
        q = q.where(job_t.c.queue == queue)
    if statuses is not None:
        q = q.where(job_t.c.status.in_(list(statuses)))
    if kind_prefix:
        q = q.where(job_t.c.kind.startswith(kind_prefix, autoescape=True))
    return q


class JobQueries:
    """Jobs by id and by tree, listings, counts, paged walks, changes since a time, and
    retention."""

    def __init__(self, catalog: Catalog, clock: Callable[[], float], ms: Callable[[], int]) -> None:
        self.catalog = catalog
        self.clock = clock
        self._ms = ms
        self._prune_lock = threading.Lock()
        self._last_prune = float("-inf")

    # --- by id and by tree -------------------------------------------------------------------
    def get(self, job_id: str) -> Job | None:
        with self.catalog.read() as conn:
            row = conn.execute(sa.select(job_t).where(job_t.c.id == job_id)).first()
        return None if row is None else Job.from_row(row)

    def get_many(self, job_ids: Iterable[str]) -> dict[str, Job]:
        ids = list(dict.fromkeys(job_ids))
        out: dict[str, Job] = {}
        with self.catalog.read() as conn:
            for chunk in chunks(ids):
                for row in conn.execute(sa.select(job_t).where(job_t.c.id.in_(chunk))):
                    out[row.id] = Job.from_row(row)
        return out

    def children(self, job_id: str) -> list[Job]:
        """Jobs enqueued with ``parent_id=job_id``, in creation order."""
        q = sa.select(job_t).where(job_t.c.parent_id == job_id)
        with self.catalog.read() as conn:
            rows = conn.execute(q.order_by(job_t.c.created_at, job_t.c.id)).all()
        return [Job.from_row(r) for r in rows]

    def tree(self, job_ids: Iterable[str]) -> list[Job]:
        """The jobs and all their descendants by ``parent_id`` (one recursive query)."""
        roots = list(dict.fromkeys(job_ids))
        if not roots:
            return []
        tree = sa.select(job_t.c.id).where(job_t.c.id.in_(roots)).cte("tree", recursive=True)
        tree = tree.union_all(sa.select(job_t.c.id).where(job_t.c.parent_id == tree.c.id))
        q = sa.select(job_t).where(job_t.c.id.in_(sa.select(tree.c.id)))
        with self.catalog.read() as conn:
            rows = conn.execute(q.order_by(job_t.c.created_at, job_t.c.id)).all()
        return [Job.from_row(r) for r in rows]

    def tree_active(self, job_ids: Iterable[str]) -> int:
        """How many of the jobs and their descendants are not terminal: one aggregate query, so
        a waiter polling a 100k-job import reads a number, not 100k rows."""
        roots = list(dict.fromkeys(job_ids))
        if not roots:
            return 0
        tree = sa.select(job_t.c.id).where(job_t.c.id.in_(roots)).cte("tree", recursive=True)
        tree = tree.union_all(sa.select(job_t.c.id).where(job_t.c.parent_id == tree.c.id))
        q = sa.select(sa.func.count()).where(
            job_t.c.id.in_(sa.select(tree.c.id)), job_t.c.status.not_in(TERMINAL_JOB_STATUSES)
        )
        with self.catalog.read() as conn:
            return int(conn.execute(q).scalar_one())

    def any_unfinished(self) -> bool:
        """Whether any job of the home is not terminal: one index seek, so a waiter whose
        tree just finished on a quiet home hears so without walking the tree."""
        q = sa.select(job_t.c.id).where(job_t.c.status.in_(ACTIVE)).limit(1)
        with self.catalog.read() as conn:
            return conn.execute(q).first() is not None

    def wait_for(
        self, job_ids: Iterable[str], *, timeout_s: float | None = None, poll_s: float = 0.1
    ) -> list[Job]:
        """Block until every job is terminal (their children are not implied); return them in
        the order given. Raises ``Unavailable`` on timeout, ``NotFound`` for an unknown id."""
        ids = list(dict.fromkeys(job_ids))
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            jobs = self.get_many(ids)
            missing = [i for i in ids if i not in jobs]
            if missing:
                raise NotFound(f"no job {missing[0]}", job_ids=missing)
            if all(j.is_terminal for j in jobs.values()):
                return [jobs[i] for i in ids]
            if deadline is not None and time.monotonic() >= deadline:
                waiting = [i for i in ids if not jobs[i].is_terminal]
                raise Unavailable(
                    f"{len(waiting)} job(s) did not finish within {timeout_s:g} s",
                    job_ids=waiting,
                )
            time.sleep(poll_s)

    # --- listings ---------------------------------------------------------------------------
    def list_jobs(
        self,
        *,
        queue: str | None = None,
        statuses: Iterable[str] | None = None,
        kind_prefix: str | None = None,
        limit: int = 1000,
        before: str | None = None,
        queues: Iterable[str] | None = None,
        by_key: str | None = None,
    ) -> list[Job]:
        """Up to ``limit`` jobs, **newest first**, filtered. ``before`` (a job id, e.g. the
        last one of the previous page) continues with the jobs created before it. ``queues``:
        only these queues (a scoped key's bases); ``by_key``: only jobs that key asked for."""
        q = _filtered(sa.select(job_t), queue=queue, statuses=statuses, kind_prefix=kind_prefix)
        if queues is not None:
            q = q.where(job_t.c.queue.in_(list(queues)))
        if by_key is not None:
            q = q.where(job_t.c.by_key == by_key)
        if before is not None:
            with self.catalog.read() as conn:
                cursor = conn.execute(
                    sa.select(job_t.c.created_at).where(job_t.c.id == before)
                ).scalar()
            if cursor is None:
                raise NotFound(f"no job {before!r} to page from", job_id=before)
            q = q.where(
                sa.or_(
                    job_t.c.created_at < cursor,
                    sa.and_(job_t.c.created_at == cursor, job_t.c.id < before),
                )
            )
        q = q.order_by(job_t.c.created_at.desc(), job_t.c.id.desc()).limit(limit)
        with self.catalog.read() as conn:
            return [Job.from_row(r) for r in conn.execute(q)]

    def iter_jobs(
        self,
        *,
        queue: str | None = None,
        statuses: Iterable[str] | None = None,
        columns: Iterable[sa.Column[Any]] | None = None,
        page: int = PAGE,
    ) -> Iterator[Any]:
        """Every matching job, oldest first, read ``page`` rows per query (keyset on
        ``(created_at, id)``): ``Job`` objects, or rows of ``columns`` (``id`` and
        ``created_at`` are always fetched) when only a few fields are needed."""
        statuses = None if statuses is None else list(statuses)
        cols = list(job_t.c) if columns is None else list(columns)
        names = {c.name for c in cols}
        extra = [c for c in (job_t.c.created_at, job_t.c.id) if c.name not in names]
        base = _filtered(sa.select(*cols, *extra), queue=queue, statuses=statuses)
        after: tuple[int, str] | None = None
        while True:
            q = base
            if after is not None:
                q = q.where(
                    sa.or_(
                        job_t.c.created_at > after[0],
                        sa.and_(job_t.c.created_at == after[0], job_t.c.id > after[1]),
                    )
                )
            with self.catalog.read() as conn:
                rows = conn.execute(q.order_by(job_t.c.created_at, job_t.c.id).limit(page)).all()
            for row in rows:
                yield Job.from_row(row) if columns is None else row
            if len(rows) < page:
                return
            last = rows[-1]._mapping
            after = (last["created_at"], last["id"])

    def count_jobs(self, *, queue: str | None = None, statuses: Iterable[str] | None = None) -> int:
        """How many jobs match, counted in SQL."""
        q = _filtered(sa.select(sa.func.count()).select_from(job_t), queue=queue, statuses=statuses)
        with self.catalog.read() as conn:
            return int(conn.execute(q).scalar() or 0)

    def active_job_ids(self, *, queue: str | None = None, limit: int = PAGE) -> list[str]:
        """Ids of up to ``limit`` pending or running jobs, oldest first."""
        q = _filtered(sa.select(job_t.c.id), queue=queue, statuses=ACTIVE)
        q = q.order_by(job_t.c.created_at, job_t.c.id).limit(limit)
        with self.catalog.read() as conn:
            return list(conn.execute(q).scalars())

    def recent_jobs(self, *, queue: str, limit: int) -> list[Job]:
        """The queue's newest ``limit`` jobs plus every active one, oldest first."""
        newest = {j.id: j for j in self.list_jobs(queue=queue, limit=limit)}
        for job in self.iter_jobs(queue=queue, statuses=ACTIVE):
            newest.setdefault(job.id, job)
        return sorted(newest.values(), key=lambda j: (j.created_at, j.id))

    def changed_jobs(
        self, *, queue: str, since_ms: int, after: tuple[int, str] | None = None, limit: int = PAGE
    ) -> list[Job]:
        """The queue's jobs with ``updated_at >= since_ms``, in ``(updated_at, id)`` order;
        ``after`` (the last row's ``(updated_at, id)``) reads the next page."""
        q = sa.select(job_t).where(job_t.c.queue == queue, job_t.c.updated_at >= since_ms)
        if after is not None:
            q = q.where(
                sa.or_(
                    job_t.c.updated_at > after[0],
                    sa.and_(job_t.c.updated_at == after[0], job_t.c.id > after[1]),
                )
            )
        q = q.order_by(job_t.c.updated_at, job_t.c.id).limit(limit)
        with self.catalog.read() as conn:
            return [Job.from_row(r) for r in conn.execute(q)]

    # --- retention -------------------------------------------------------------------------
    def prune_terminal(
        self, *, retention_s: float, min_interval_s: float = 0, page: int = PAGE
    ) -> int:
        """Delete job trees that are wholly terminal and finished more than ``retention_s``
        ago; returns how many jobs went. With ``min_interval_s`` a call within that long of
        the previous run returns 0 at once, so the sweep may call it every time. Both
        durations are on the manager's clock. ``retention_s <= 0`` keeps everything."""
        if retention_s <= 0:
            return 0
        with self._prune_lock:
            if self.clock() - self._last_prune < min_interval_s:
                return 0
            self._last_prune = self.clock()
        cutoff = self._ms() - int(retention_s * 1000)
        parent = job_t.alias("parent")
        # Roots: no parent, or a parent that is gone (rows from before trees were pruned whole).
        roots_q = (
            sa.select(job_t.c.id, job_t.c.finished_at)
            .select_from(job_t.outerjoin(parent, parent.c.id == job_t.c.parent_id))
            .where(
                sa.or_(job_t.c.parent_id.is_(None), parent.c.id.is_(None)),
                job_t.c.status.in_(TERMINAL_JOB_STATUSES),
                job_t.c.finished_at < cutoff,
            )
        )
        deleted = 0
        after: tuple[int, str] | None = None
        while True:
            q = roots_q
            if after is not None:
                q = q.where(
                    sa.or_(
                        job_t.c.finished_at > after[0],
                        sa.and_(job_t.c.finished_at == after[0], job_t.c.id > after[1]),
                    )
                )
            with self.catalog.read() as conn:
                roots = conn.execute(q.order_by(job_t.c.finished_at, job_t.c.id).limit(page)).all()
            if not roots:
                return deleted
            after = (roots[-1].finished_at, roots[-1].id)
            deleted += self._delete_finished_trees([r.id for r in roots], cutoff)

    def _delete_finished_trees(self, root_ids: list[str], cutoff: int) -> int:
        """Delete each root's tree when every job in it is terminal and finished before
        ``cutoff``; checked and deleted in one write transaction, so a child enqueued under a
        root meanwhile keeps the tree."""
        tree = (
            sa.select(job_t.c.id.label("root"), job_t.c.id.label("id"))
            .where(job_t.c.id.in_(root_ids))
            .cte("tree", recursive=True)
        )
        tree = tree.union_all(
            sa.select(tree.c.root, job_t.c.id).where(job_t.c.parent_id == tree.c.id)
        )
        keep = sa.or_(
            job_t.c.status.not_in(TERMINAL_JOB_STATUSES),
            job_t.c.finished_at.is_(None),
            job_t.c.finished_at >= cutoff,
        )
        q = sa.select(tree.c.root, tree.c.id, sa.case((keep, 1), else_=0).label("keep")).join(
            job_t, job_t.c.id == tree.c.id
        )
        with self.catalog.write_tx() as conn:
            members: dict[str, list[str]] = {}
            kept: set[str] = set()
            for root, job_id, keep_it in conn.execute(q):
                members.setdefault(root, []).append(job_id)
                if keep_it:
                    kept.add(root)
            doomed = [j for root, ids in members.items() if root not in kept for j in ids]
            for i in range(0, len(doomed), PAGE):
                conn.execute(sa.delete(job_t).where(job_t.c.id.in_(doomed[i : i + PAGE])))
        return len(doomed)


__all__ = ["ACTIVE", "PAGE", "JobQueries"]
