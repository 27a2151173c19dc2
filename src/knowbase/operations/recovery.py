"""The recovery sweep: jobs by their kind's policy, then items by their jobs (DESIGN.md).

Runs at worker start and periodically. It never blanket-updates: a pending job belongs to the
home and is left alone; an active item is failed only when no live job covers it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog import bases as base_repo
from knowbase.catalog import item_changes
from knowbase.catalog import items as item_repo
from knowbase.catalog.db import now_ms
from knowbase.catalog.models import Item
from knowbase.catalog.schema import ACTIVE_STATUSES
from knowbase.catalog.schema import job as job_t
from knowbase.catalog.schema import knowledge_base as base_t
from knowbase.diskspace import is_disk_full
from knowbase.files import list_orphan_base_dirs
from knowbase.files.staging import remove_stale_staging
from knowbase.jobs.listing import ACTIVE
from knowbase.operations import kinds
from knowbase.runtime import Runtime, queue_of

log = logging.getLogger(__name__)
DELETE_CHUNK = 500


#: The sweep prunes old terminal jobs at most this often (seconds, real time).
JOB_PRUNE_INTERVAL_S = 3600.0
#: Item tombstones serve live event streams only; a reconnecting client reads a full snapshot.
TOMBSTONE_KEEP_MS = 86_400_000
#: A base folder without a catalog row is removed only when nothing in it changed for this
#: long: a base being created (folder first, row in the same second) is never touched.
ORPHAN_GRACE_S = 3600.0


@dataclass
class SweepReport:
    interrupted: list[str] = field(default_factory=list)
    deletes_enqueued: int = 0
    jobs_pruned: int = 0
    orphan_dirs_removed: list[str] = field(default_factory=list)
    staging_removed: list[str] = field(default_factory=list)


def _covered_ids(rt: Runtime) -> set[str]:
    """Item ids named by a pending or running job: one read of the payloads, streamed.

    Not paged in ``(created_at, id)`` order: no index serves that order for two statuses, so
    each page sorted every active job again -- 6-7 s per sweep with 80k files queued, while
    the sweep held the catalog's writer (a 100k-file import ran at half speed)."""
    covered: set[str] = set()
    query = sa.select(job_t.c.payload).where(job_t.c.status.in_(ACTIVE))
    with rt.catalog.read() as conn:
        for (raw,) in conn.execution_options(yield_per=2000).execute(query):
            payload = json.loads(raw or "{}")
            if payload.get("item_id"):
                covered.add(payload["item_id"])
            covered.update(payload.get("root_item_ids", []))
    return covered


def _is_covered(item: Item, covered: set[str], parents: dict[str, str | None]) -> bool:
    node: str | None = item.id
    seen: set[str] = set()
    while node and node not in seen:
        if node in covered:
            return True
        seen.add(node)
        node = parents.get(node)
    return False


def sweep(rt: Runtime) -> SweepReport:
    """Recover lapsed jobs, fail uncovered active items, re-enqueue orphaned deletes; then
    housekeeping: prune old terminal jobs (``job_retention_days``), remove orphan base
    folders. Each step runs whatever the one before it did: a failure is logged, not raised."""
    report = SweepReport()
    try:
        rt.jobs.leases.recover()
    except Exception as exc:
        _log_failure("job recovery failed", exc)
    try:
        with rt.catalog.write_tx() as conn:
            _recover_items(rt, conn, report)
    except Exception as exc:
        _log_failure("item recovery failed", exc)
    try:
        report.jobs_pruned = rt.jobs.queries.prune_terminal(
            retention_s=rt.settings.job_retention_days * 86_400,
            min_interval_s=JOB_PRUNE_INTERVAL_S,
        )
    except Exception as exc:
        _log_failure("job retention failed", exc)
    try:
        with rt.catalog.write_tx() as conn:
            item_changes.prune_tombstones(conn, before_ms=now_ms() - TOMBSTONE_KEEP_MS)
    except Exception as exc:
        _log_failure("tombstone cleanup failed", exc)
    try:
        # A base another process deleted: its index files are gone from disk, but a store
        # this process opened would hold them (and their space) until it exits.
        rt.release_vanished_stores()
    except Exception as exc:
        _log_failure("closing the stores of deleted bases failed", exc)
    try:
        report.orphan_dirs_removed = remove_orphan_base_dirs(rt)
    except Exception as exc:
        _log_failure("orphan base folder cleanup failed", exc)
    try:
        report.staging_removed = remove_stale_staging_dirs(rt)
    except Exception as exc:
        _log_failure("staging folder cleanup failed", exc)
    if report.interrupted or report.deletes_enqueued or report.jobs_pruned:
        log.info(
            "recovery: %d interrupted items failed, %d delete jobs re-enqueued, %d old jobs pruned",
            len(report.interrupted),
            report.deletes_enqueued,
            report.jobs_pruned,
        )
    return report


def _recover_items(rt: Runtime, conn: Connection, report: SweepReport) -> None:
    """Fail the active items no job covers, and re-enqueue the deletes no job covers."""
    # Items first, then the jobs that cover them: an item and its job commit together, so a
    # job of every item read here is visible to the later read. The other order (PostgreSQL,
    # READ COMMITTED) failed an item added between the two reads.
    active = item_repo.active_items(conn)
    deleting = item_repo.deleting_roots(conn)
    # Most sweeps find nothing active: then no job needs reading at all.
    covered = _covered_ids(rt) if active or deleting else set()
    if active:
        parents = _parents(conn, active)
        uncovered = [i for i in active if not _is_covered(i, covered, parents)]
        # A ``processing`` container is a roll-up of its children, not a job's work: no job
        # names it once its expansion is done. Failing it would report a live import as
        # interrupted; re-derive it from its children instead.
        rolled_up = {i.id for i in uncovered if i.is_container and i.status == "processing"}
        lost = [i.id for i in uncovered if i.id not in rolled_up]
        if lost:
            report.interrupted = item_repo.fail_items(
                conn,
                lost,
                "indexing_interrupted",
                "Indexing was interrupted (the process running it stopped)",
                # one whose job ended between the two reads is no longer active
                only_statuses=ACTIVE_STATUSES,
            )
        for container_id in rolled_up:
            item_repo.reconcile_containers(conn, container_id)
    roots_by_base: dict[str, list[str]] = {}
    for root in deleting:
        if root.id not in covered:
            roots_by_base.setdefault(root.base_id, []).append(root.id)
    for base_id, roots in roots_by_base.items():
        for i in range(0, len(roots), DELETE_CHUNK):
            part = roots[i : i + DELETE_CHUNK]
            rt.jobs.enqueuer.enqueue(
                conn,
                kinds.DELETE_SUBTREE.name,
                {"base_id": base_id, "root_item_ids": part},
                queue=queue_of(base_id),
                idempotency_key=kinds.delete_key(base_id, part),
            )
            report.deletes_enqueued += 1


def _log_failure(what: str, exc: Exception) -> None:
    # A full disk fails every write of the sweep: one line each, not a traceback each time.
    if is_disk_full(exc):
        log.warning("%s: disk full (%s)", what, exc)
    else:
        log.exception(what)


def remove_stale_staging_dirs(rt: Runtime) -> list[str]:
    """Remove the staging folders of adds whose process died mid-copy (``staging.py``)."""
    with rt.catalog.read() as conn:
        base_ids = sorted(conn.execute(sa.select(base_t.c.id)).scalars())
    removed: list[str] = []
    for base_id in base_ids:
        for name in remove_stale_staging(rt.storage(base_id)):
            log.warning("removed a crashed add's staging folder %s of base %s", name, base_id)
            removed.append(f"{base_id}/{name}")
    return removed


def remove_orphan_base_dirs(rt: Runtime, *, grace_s: float = ORPHAN_GRACE_S) -> list[str]:
    """Remove base folders that no catalog row names (spec §2.4: a crash between deleting a
    base's row and its folder, or a create that never got its row). Only UUID-named folders
    untouched for ``grace_s``; each is re-checked under the base lock before it goes."""
    with rt.catalog.read() as conn:
        known = set(conn.execute(sa.select(base_t.c.id)).scalars())
    candidates = list_orphan_base_dirs(
        rt.settings.bases_dir, known, now=time.time(), min_age_s=grace_s
    )
    removed: list[str] = []
    for path in candidates:
        base_id = path.name
        with rt.lock(base_id):
            with rt.catalog.read() as conn:
                if base_repo.find(conn, base_id) is not None:
                    continue  # created meanwhile
            rt.close_store(base_id)
            rt.storage(base_id).remove_all()
        log.warning("removed orphan base folder %s (no catalog row)", path)
        removed.append(base_id)
    return removed


def _parents(conn, items: list[Item]) -> dict[str, str | None]:  # type: ignore[no-untyped-def]
    """Parent links of the items and all their ancestors."""
    parents: dict[str, str | None] = {i.id: i.group_id for i in items}
    todo = {p for p in parents.values() if p and p not in parents}
    while todo:
        found = item_repo.find_many(conn, todo)
        for item_id in todo:
            row = found.get(item_id)
            parents[item_id] = row.group_id if row else None
        todo = {p for p in parents.values() if p and p not in parents}
    return parents
