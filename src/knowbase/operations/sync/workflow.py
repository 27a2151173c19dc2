"""``sync_base``: compare a base with its origins and schedule the difference (issue 15).

The scan is read-only I/O at the edge (stat every origin file, hash only the files the stamps
cannot decide), the decision is :func:`knowbase.pipeline.sources.sync_plan.plan_sync`, and the
apply step is one ``knowledge.sync`` job (``sync/handler.py``) whose children are the usual
index / delete jobs — one job tree with progress. A dry run stops after the plan.

Scopes: each folder item whose origin is a reachable directory (its files keyed by origin
path), and the standalone file items whose origin file still exists. An unreachable origin is
reported, never treated as "every file vanished". Pages (url items, alone or in a sitemap)
older than the base's ``url_max_age`` are listed for a conditional re-fetch by the job, and
sitemaps as old are re-read: pages they gained are added, pages they dropped are reported (and
deleted only with ``--prune``), pages a user deleted stay out.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.guards import assert_base_runnable
from knowbase.catalog.models import Base, Item
from knowbase.operations import kinds
from knowbase.operations.delete.workflow import SYNC_EXCLUDED_KEY
from knowbase.pipeline.sources.sync_plan import (
    FoundFile,
    HeldFile,
    Stamp,
    SyncPlan,
    needs_hash,
    plan_sync,
)
from knowbase.runtime import Runtime, queue_of

STAMP_KEY = "origin_stamp"  # item data: [size, mtime_ns] of the origin its raw/ copy equals
FETCHED_KEY = "fetched_at"  # item data: ms of the last fetch (or 304) of a page


@dataclass
class SyncReport:
    """What a sync found and scheduled; ``job_id`` is None on a dry run or when idle."""

    base_id: str
    dry_run: bool
    prune: bool
    added: list[dict[str, Any]] = field(default_factory=list)  # {path, folder_id}
    changed: list[dict[str, Any]] = field(default_factory=list)  # {item_id, path, reason}
    unchanged: list[dict[str, Any]] = field(default_factory=list)  # {item_id, path}
    vanished: list[dict[str, Any]] = field(default_factory=list)  # {item_id, path, deleted}
    failed: list[dict[str, Any]] = field(default_factory=list)  # {item_id?, path, reason}
    # origin files of items a user deleted from a synced folder: never added back by a sync
    excluded: list[dict[str, Any]] = field(default_factory=list)  # {path, folder_id}
    refresh: list[dict[str, Any]] = field(default_factory=list)  # pages to re-fetch
    job_id: str | None = None
    urls: dict[str, Any] = field(default_factory=dict)  # the job's page outcomes, once waited

    @property
    def is_noop(self) -> bool:
        return not (self.added or self.changed or self.refresh or self._deletes)

    @property
    def _deletes(self) -> bool:
        return any(v["deleted"] for v in self.vanished)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def file_sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _stamp_of(item: Item) -> Stamp | None:
    raw = item.data.get(STAMP_KEY)
    if isinstance(raw, list) and len(raw) == 2:
        return Stamp(int(raw[0]), int(raw[1]))
    return None


def _held(rt: Runtime, base: Base, item: Item) -> HeldFile:
    rel = item.relative_path
    raw_size: int | None = None
    if rel:
        try:
            raw_size = rt.storage(base.id).path_of(rel).stat().st_size
        except OSError:
            raw_size = None
    return HeldFile(str(item.origin), item.id, item.status, raw_size, _stamp_of(item))


def _found(path: Path) -> FoundFile | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return FoundFile(str(path), st.st_size, st.st_mtime_ns)


@dataclass
class _Scope:
    """One planned scope: a folder root (``root`` set) or the standalone files."""

    root: Item | None
    plan: SyncPlan
    held: dict[str, HeldFile]
    errors: list[dict[str, Any]] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)  # origin paths the user deleted


def _decide(
    rt: Runtime,
    base: Base,
    held: dict[str, HeldFile],
    found: dict[str, FoundFile],
    by_id: dict[str, Item],
) -> tuple[SyncPlan, list[dict[str, Any]]]:
    """Hash what the stamps leave open, then plan. A file that cannot be hashed is a failure."""
    same: dict[str, bool] = {}
    errors: list[dict[str, Any]] = []
    for key in needs_hash(held, found):
        h = held[key]
        rel = by_id[h.item_id].relative_path or ""
        try:
            same[key] = file_sha256(Path(key)) == file_sha256(rt.storage(base.id).path_of(rel))
        except OSError as exc:
            errors.append({"item_id": h.item_id, "path": key, "reason": f"unreadable: {exc}"})
            found.pop(key, None)
            held.pop(key, None)
    return plan_sync(held, found, same), errors


def _folder_scope(rt: Runtime, base: Base, root: Item, rows: list[Item]) -> _Scope:
    from knowbase.pipeline.sources.directory import expand
    from knowbase.pipeline.sources.ignore import IgnoreRules

    origin = Path(str(root.origin))
    rules = IgnoreRules(max_file_bytes=rt.settings.max_file_bytes, keep_out=rt.settings.keep_out)
    expansion = expand(origin, rules, as_text=tuple(root.data.get("as_text_globs") or ()))
    leaves = [r for r in rows if r.type == "file" and r.origin]
    by_id = {r.id: r for r in leaves}
    held = {str(r.origin): _held(rt, base, r) for r in leaves}
    found: dict[str, FoundFile] = {}
    gone = [str(p) for p in root.data.get(SYNC_EXCLUDED_KEY) or []]
    excluded: list[str] = []
    for f in expansion.files:
        stat = _found(f.abs_path)
        if stat is None:
            continue
        if stat.key not in held and any(
            stat.key == g or stat.key.startswith(g.rstrip(os.sep) + os.sep) for g in gone
        ):
            excluded.append(stat.key)
        else:
            found[stat.key] = stat
    plan, errors = _decide(rt, base, held, found, by_id)
    # Sub-folders that vanished (or lost every file) go with their files on a prune.
    live_dirs = {str(origin / d.rel) for d in expansion.dirs}
    for r in rows:
        if r.type == "directory" and r.id != root.id and r.source not in live_dirs:
            plan.vanished.append(_dir_change(r))
    return _Scope(root, plan, held, errors, sorted(excluded))


def _dir_change(row: Item) -> Any:
    from knowbase.pipeline.sources.sync_plan import Change

    return Change(row.id, row.source, "vanished_folder")


def plan_base(
    rt: Runtime, base: Base, only: Collection[str] | None = None
) -> tuple[list[_Scope], list[dict[str, Any]], list[Item]]:
    """Scan every scope of ``base``: (scopes, unreachable origins, pages due a re-fetch).

    ``only`` limits the scan to these items (a re-added source, ``operations/add/readd.py``):
    roots, or files inside a folder.
    """
    with rt.catalog.read() as conn:
        items = item_repo.list_items(conn, base.id)
    if only is not None:
        items = [r for r in items if r.group_id is not None or r.id in only]
    with rt.catalog.read() as conn:
        rows_of = {
            r.id: item_repo.subtree(conn, [r.id])
            for r in items
            if r.type == "directory" and r.group_id is None
        }
    scopes: list[_Scope] = []
    unreachable: list[dict[str, Any]] = []
    for root in (r for r in items if r.type == "directory" and r.group_id is None):
        if not root.origin or not Path(root.origin).is_dir():
            unreachable.append(
                {"item_id": root.id, "path": root.origin or root.source, "reason": "origin_missing"}
            )
        elif root.status not in ("completed", "failed"):
            unreachable.append({"item_id": root.id, "path": root.origin, "reason": "busy"})
        else:
            scopes.append(_folder_scope(rt, base, root, rows_of[root.id]))
    # A file inside a folder is planned alone when a re-add names it (``only``) and not its folder.
    singles = [
        r
        for r in items
        if r.type == "file"
        and r.origin
        and (r.group_id is None or (only is not None and r.id in only))
    ]
    held: dict[str, HeldFile] = {}
    found: dict[str, FoundFile] = {}
    for r in singles:
        stat = _found(Path(str(r.origin))) if Path(str(r.origin)).is_file() else None
        if stat is None:
            unreachable.append({"item_id": r.id, "path": r.origin, "reason": "origin_missing"})
            continue
        held[stat.key] = _held(rt, base, r)
        found[stat.key] = stat
    plan, errors = _decide(rt, base, held, found, {r.id: r for r in singles})
    scopes.append(_Scope(None, plan, held, errors))
    pages = _pages_due(rt, base, items) if only is None else []  # pages: a re-add re-fetches
    return scopes, unreachable, pages


def _pages_due(rt: Runtime, base: Base, items: list[Item]) -> list[Item]:
    """Pages and sitemaps fetched longer than ``url_max_age`` ago (a sitemap is re-read for
    pages it gained or lost)."""
    if base.url_max_age is None:
        return []
    now_ms = int(rt.clock() * 1000)
    due = []
    for r in items:
        if r.status not in ("completed", "failed"):
            continue
        if not (r.type == "url" and r.relative_path) and r.type != "sitemap":
            continue
        fetched = int(r.data.get(FETCHED_KEY) or r.created_at)
        if now_ms - fetched >= base.url_max_age * 1000:
            due.append(r)
    return due


def sync_base(
    rt: Runtime,
    base_id: str,
    *,
    prune: bool | None = None,
    dry_run: bool = False,
    only: Collection[str] | None = None,
) -> SyncReport:
    """Plan a sync of ``base_id`` and, unless ``dry_run``, enqueue the job that applies it.

    ``prune`` None follows the base's ``sync_deletes``; ``only`` limits it to these root items.
    Nothing is written here but the job.
    """
    with rt.catalog.read() as conn:
        base = base_repo.get(conn, base_id)
    assert_base_runnable(base, "syncing")
    return sync_resolved(rt, base, prune=prune, dry_run=dry_run, only=only)


def sync_resolved(
    rt: Runtime,
    base: Base,
    *,
    prune: bool | None = None,
    dry_run: bool = False,
    only: Collection[str] | None = None,
) -> SyncReport:
    """:func:`sync_base` on a row its caller read and checked (a re-add's update)."""
    prune = base.sync_deletes if prune is None else prune
    scopes, unreachable, pages = plan_base(rt, base, only)
    report = SyncReport(base.id, dry_run, prune, failed=list(unreachable))
    payload_scopes = []
    restamps: dict[str, Stamp] = {}
    for s in scopes:
        p = s.plan
        report.failed.extend(s.errors)
        folder_id = s.root.id if s.root else None
        report.added.extend({"path": k, "folder_id": folder_id} for k in p.added)
        report.excluded.extend({"path": k, "folder_id": folder_id} for k in s.excluded)
        report.changed.extend(
            {"item_id": c.item_id, "path": c.key, "reason": c.reason} for c in p.changed
        )
        paths = {h.item_id: k for k, h in s.held.items()}
        report.unchanged.extend({"item_id": i, "path": paths.get(i)} for i in p.unchanged)
        report.vanished.extend(
            {"item_id": c.item_id, "path": c.key, "deleted": prune, "reason": c.reason}
            for c in p.vanished
        )
        report.failed.extend({"item_id": i, "path": paths.get(i), "reason": "busy"} for i in p.busy)
        payload_scopes.append(
            {
                "root_id": folder_id,
                "added": [_rel_of(s.root, k) for k in p.added] if s.root else [],
                "changed": [c.item_id for c in p.changed],
                "prune": [c.item_id for c in p.vanished] if prune else [],
            }
        )
        restamps.update(p.restamp)
    report.refresh = [
        {"item_id": r.id, "url": r.origin or r.data.get("url"), "kind": r.type} for r in pages
    ]
    if dry_run:
        return report
    _restamp(rt, base.id, restamps)
    if report.is_noop:
        return report
    job = rt.jobs.enqueuer.enqueue_now(
        kinds.SYNC_BASE.name,
        {
            "base_id": base.id,
            "scopes": payload_scopes,
            "pages": [r.id for r in pages if r.type == "url"],
            "sitemaps": [r.id for r in pages if r.type == "sitemap"],
            "prune": prune,
        },
        # No idempotency key: a sync planned after another must not join the older plan
        # (the apply step re-checks every row, so two overlapping syncs never duplicate).
        queue=queue_of(base.id),
    )
    report.job_id = job.id
    return report


def _restamp(rt: Runtime, base_id: str, stamps: dict[str, Stamp]) -> None:
    """Record that these raw/ copies equal their origins as stat'ed (before hashing), so the
    next sync decides them by stat alone. Data only; an item that moved meanwhile is skipped."""
    if not stamps:
        return
    with rt.lock(base_id), rt.catalog.write_tx() as conn:
        for item_id, current in item_repo.find_many(conn, stamps).items():
            if current.status == "completed":
                st = stamps[item_id]
                item_repo.update_data(conn, item_id, **{STAMP_KEY: [st.size, st.mtime_ns]})


def _rel_of(root: Item | None, key: str) -> str:
    """The POSIX path of ``key`` under the folder's origin (what the raw/ copy is named)."""
    assert root is not None and root.origin
    return posixpath.join(*Path(os.path.relpath(key, root.origin)).parts)
