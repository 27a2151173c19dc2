"""The recovery sweep: jobs by their kind's policy, then items by their jobs (DESIGN.md).

Runs at worker start and periodically. It never blanket-updates: a pending job belongs to the
home and is left alone; an active item is failed only when no live job covers it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Item
from knowbase.catalog.schema import ACTIVE_STATUSES
from knowbase.runtime import Runtime, queue_of
from knowbase.tasks import kinds

log = logging.getLogger(__name__)
DELETE_CHUNK = 500


@dataclass
class SweepReport:
    interrupted: list[str] = field(default_factory=list)
    deletes_enqueued: int = 0


def _covered_ids(rt: Runtime) -> set[str]:
    covered: set[str] = set()
    for job in rt.jobs.list_jobs(statuses=["pending", "running"], limit=10_000_000):
        if job.payload.get("item_id"):
            covered.add(job.payload["item_id"])
        covered.update(job.payload.get("root_item_ids", []))
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
    """Recover lapsed jobs, fail uncovered active items, re-enqueue orphaned deletes."""
    report = SweepReport()
    try:
        rt.jobs.recover()
    except Exception:
        log.exception("job recovery failed")
    try:
        with rt.catalog.write_tx() as conn:
            # Items first, then the jobs that cover them: an item and its job commit together,
            # so a job of every item read here is visible to the later read. The other order
            # (PostgreSQL, READ COMMITTED) failed an item added between the two reads.
            active = item_repo.active_items(conn)
            covered = _covered_ids(rt)
            if active:
                parents = _parents(conn, active)
                uncovered = [i for i in active if not _is_covered(i, covered, parents)]
                # A ``processing`` container is a roll-up of its children, not a job's work:
                # no job names it once its expansion is done. Failing it would report a live
                # import as interrupted; re-derive it from its children instead.
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
            for root in item_repo.deleting_roots(conn):
                if root.id not in covered:
                    roots_by_base.setdefault(root.base_id, []).append(root.id)
            for base_id, roots in roots_by_base.items():
                for i in range(0, len(roots), DELETE_CHUNK):
                    part = roots[i : i + DELETE_CHUNK]
                    rt.jobs.enqueue(
                        conn,
                        kinds.DELETE_SUBTREE.name,
                        {"base_id": base_id, "root_item_ids": part},
                        queue=queue_of(base_id),
                        idempotency_key=kinds.delete_key(base_id, part),
                    )
                    report.deletes_enqueued += 1
    except Exception:
        log.exception("item recovery failed")
    if report.interrupted or report.deletes_enqueued:
        log.info(
            "recovery: %d interrupted items failed, %d delete jobs re-enqueued",
            len(report.interrupted),
            report.deletes_enqueued,
        )
    return report


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
