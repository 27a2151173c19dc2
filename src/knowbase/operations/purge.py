"""Remove subtrees for good: cancel their jobs (outside the lock), then vectors → files → rows."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from sqlalchemy.engine import Connection

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.catalog.schema import TERMINAL_JOB_STATUSES
from knowbase.operations.kinds import ALL_KINDS
from knowbase.runtime import Runtime, queue_of

log = logging.getLogger(__name__)
_ACTIVE_JOB = [s for s in ("pending", "running") if s not in TERMINAL_JOB_STATUSES]


def active_jobs_touching(
    rt: Runtime, base_id: str, item_ids: Iterable[str], *, exclude_job_id: str | None = None
) -> list[str]:
    """Non-terminal jobs of the base whose item or roots are among ``item_ids``."""
    ids = set(item_ids)
    kinds = {k.name for k in ALL_KINDS}
    found = []
    for job in rt.jobs.queries.iter_jobs(queue=queue_of(base_id), statuses=_ACTIVE_JOB):
        if job.id == exclude_job_id or job.kind not in kinds:
            continue
        touched = {job.payload.get("item_id"), *job.payload.get("root_item_ids", [])}
        if touched & ids:
            found.append(job.id)
    return found


def cancel_subtree_jobs(
    rt: Runtime,
    base_id: str,
    root_ids: Iterable[str],
    *,
    exclude_job_id: str | None = None,
    timeout_s: float = 30,
) -> None:
    """Cancel and wait for every job on the subtrees. Never call this under the base lock."""
    assert not rt.mutex.held_by_current_thread(base_id), "cancelling under the base lock"
    with rt.catalog.read() as conn:
        ids = item_repo.subtree_ids(conn, root_ids)
    job_ids = active_jobs_touching(rt, base_id, ids, exclude_job_id=exclude_job_id)
    if job_ids:
        rt.jobs.cancels.cancel_and_wait(job_ids, timeout_s=timeout_s)


def purge_rows(rt: Runtime, conn: Connection, base: Base, rows: list[Item]) -> None:
    """Vectors, then files (best effort), then catalog rows — a crash in between is safe."""
    if not rows:
        return
    store = rt.store_if_exists(base)
    leaves = [r.id for r in rows if not r.is_container]
    if store is not None and leaves:
        store.delete_materials(leaves)
    files: list[str] = []
    prefixes: list[str] = []
    for r in rows:
        rel = r.data.get("relative_path")
        if r.is_container:
            if rel:
                prefixes.append(rel)
            continue
        files.extend(p for p in (rel, r.data.get("indexed_relative_path")) if p)
    problems = rt.storage(base.id).delete_paths(files, prefixes)
    for problem in problems:
        log.warning("purge of base %s: %s", base.id, problem)
    item_repo.delete_rows(conn, [r.id for r in rows])
