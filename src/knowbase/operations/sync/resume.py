"""Before ``kb sync`` plans: finish what an interrupted sync (or import) left, or say who is busy.

A sync leaves a folder alone while its items are active (the plan reports it ``busy``). After a
``kill -9`` of ``kb sync`` those items stay active with their jobs running under a dead process,
and each later sync only said "busy" and exited 0 (issue 26). So, when items of the base are
active, the sync first runs the recovery sweep -- the dead process's jobs go back to the queue
(their kinds recover by ``retry``), active items no job covers fail -- and then:

- if another live process runs jobs of the base (``kb serve``, a waiting ``kb add``), the base is
  genuinely busy: :class:`~knowbase.errors.BaseBusy`, naming the process, and nothing is planned;
- otherwise the base's unfinished jobs are returned for the caller to run to the end first (the
  interrupted work resumes), and the plan then sees every folder settled.
"""

from __future__ import annotations

import sqlalchemy as sa

from knowbase.catalog.schema import ACTIVE_STATUSES
from knowbase.catalog.schema import knowledge_item as item_t
from knowbase.errors import BaseBusy
from knowbase.jobs.listing import ACTIVE
from knowbase.jobs.liveness import parse_worker_id
from knowbase.jobs.model import Job
from knowbase.operations.recovery import sweep
from knowbase.runtime import Runtime, queue_of

#: Unfinished jobs read at most (a base's queue after a crash holds one per file in flight).
MAX_JOBS = 1_000_000


def has_active_items(rt: Runtime, base_id: str) -> bool:
    """Whether any item of the base is on its way (preparing … embedding)."""
    q = sa.select(item_t.c.id).where(
        item_t.c.base_id == base_id, item_t.c.status.in_(ACTIVE_STATUSES)
    )
    with rt.catalog.read() as conn:
        return conn.execute(q.limit(1)).first() is not None


def unfinished_jobs(rt: Runtime, base_id: str) -> list[Job]:
    """The base's unfinished jobs, after the recovery sweep put a dead process's running jobs
    back in the queue: what a caller waits on (its workers run them) to resume an import."""
    sweep(rt)
    return rt.jobs.queries.list_jobs(queue=queue_of(base_id), statuses=list(ACTIVE), limit=MAX_JOBS)


def unfinished_before_sync(rt: Runtime, base_id: str) -> list[str]:
    """The base's jobs to finish before a sync plans (empty when no item is active).

    Runs the recovery sweep first. Raises :class:`BaseBusy` when another live process runs
    jobs of the base; jobs this process's own workers run are returned like pending ones.
    """
    if not has_active_items(rt, base_id):
        return []
    jobs = unfinished_jobs(rt, base_id)
    own = rt.jobs.worker_id
    elsewhere = [j for j in jobs if j.status == "running" and j.locked_by not in (None, own)]
    if elsewhere:
        holders = sorted({str(j.locked_by) for j in elsewhere})
        who = ", ".join(_describe(h) for h in holders[:3])
        raise BaseBusy(
            f"the base is busy: {len(elsewhere)} of its jobs run in another process ({who}); "
            "sync it once they are done",
            base_id=base_id,
            running=len(elsewhere),
            workers=holders,
        )
    return [j.id for j in jobs]


def _describe(worker_id: str) -> str:
    parsed = parse_worker_id(worker_id)
    return f"pid {parsed.pid} on {parsed.host}" if parsed else worker_id


__all__ = ["has_active_items", "unfinished_before_sync", "unfinished_jobs"]
