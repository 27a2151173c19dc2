"""``kb sync --watch`` / ``kb serve --watch``: re-run the sync when a watched origin changes.

watchfiles debounces the events; each batch runs the same ``Knowledge.sync`` and waits for its
job tree, so keyword and vector state move together (each item is rebuilt atomically). The
watch is set on the nearest existing ancestor of every origin and recomputed after each batch
(and on every timeout tick), so a folder that disappears and comes back is seen again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def _anchor(path: Path) -> Path:
    """The path itself, or its nearest existing ancestor (a vanished folder's parent)."""
    for p in (path, *path.parents):
        if p.exists():
            return p
    return Path(path.anchor)


def watch_roots(kb: Any, base_id: str) -> set[Path]:
    """What to watch: folder origins, and the folders of standalone file origins."""
    roots: set[Path] = set()
    for item in kb.list_items(base_id, roots_only=True):
        if item.type == "directory" and item.origin:
            roots.add(_anchor(Path(item.origin)))
        elif item.type == "file" and item.origin:
            roots.add(_anchor(Path(item.origin).parent))
    return roots


def _owners(changed: set[Path], roots_by_base: dict[str, set[Path]]) -> list[str]:
    """The bases with a watched root at or above a changed path (an over-approximation is
    harmless: a sync that finds nothing new schedules nothing and embeds nothing)."""
    owners = []
    for base_id, roots in roots_by_base.items():
        if any(r == p or r in p.parents for p in changed for r in roots):
            owners.append(base_id)
    return owners


def _watched(kb: Any, base_ids: list[str] | None) -> dict[str, set[Path]]:
    """Roots per base: the given bases, or every runnable base of the home (new bases are
    picked up on the next tick)."""
    if base_ids is None:
        base_ids = [b.id for b in kb.list_bases() if b.status != "failed"]
    out: dict[str, set[Path]] = {}
    for base_id in base_ids:
        try:
            out[base_id] = watch_roots(kb, base_id)
        except Exception:  # a base deleted meanwhile: stop watching it
            log.debug("base %s is gone; not watched", base_id, exc_info=True)
    return out


def watch_bases(
    kb: Any,
    base_ids: list[str] | None = None,
    *,
    prune: bool | None = None,
    on_report: Callable[[Any], None] | None = None,
    stop: threading.Event | None = None,
    debounce_ms: int = 300,
    run_workers: bool = True,
) -> None:
    """Sync each base once, then after every debounced batch of changes sync the bases whose
    origins changed, until ``stop`` is set. ``base_ids=None`` watches every base of the home
    (``kb serve --watch``). ``run_workers=False`` when the caller already runs the workers."""
    from watchfiles import watch

    stop = stop or threading.Event()
    if run_workers:
        kb.start_workers()
    try:
        roots_by_base = _watched(kb, base_ids)
        for base_id in roots_by_base:
            _sync(kb, base_id, prune, on_report)
        while not stop.is_set():
            roots = set().union(*roots_by_base.values()) if roots_by_base else set()
            if not roots:
                stop.wait(1.0)
                roots_by_base = _watched(kb, base_ids)
                continue
            for changes in watch(
                *roots,
                stop_event=stop,
                debounce=debounce_ms,
                yield_on_timeout=True,
                rust_timeout=1000,
                raise_interrupt=False,
            ):
                if changes:
                    changed = {Path(path) for _, path in changes}
                    for base_id in _owners(changed, roots_by_base):
                        _sync(kb, base_id, prune, on_report)
                now = _watched(kb, base_ids)
                if now != roots_by_base:
                    roots_by_base = now
                    break  # a folder or a base came or went: watch the new set
    finally:
        if run_workers:
            kb.stop_workers()


def watch_base(
    kb: Any,
    base_id: str,
    *,
    prune: bool | None = None,
    on_report: Callable[[Any], None] | None = None,
    stop: threading.Event | None = None,
    debounce_ms: int = 300,
) -> None:
    """Sync once, then after every debounced batch of changes, until ``stop`` is set."""
    watch_bases(kb, [base_id], prune=prune, on_report=on_report, stop=stop, debounce_ms=debounce_ms)


def _sync(kb: Any, base_id: str, prune: bool | None, on_report: Callable | None) -> None:
    try:
        report = kb.sync(base_id, prune=prune)
        if report.job_id:
            kb.wait([report.job_id])
        if on_report is not None and not report.is_noop:
            on_report(report)
    except Exception:  # a watch outlives one bad sync; the next change tries again
        log.exception("sync of %s failed", base_id)
