"""``kb sync --watch``: re-run the sync when a watched origin changes (issue 15 item 2).

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
    from watchfiles import watch

    stop = stop or threading.Event()
    kb.start_workers()
    try:
        _sync(kb, base_id, prune, on_report)
        while not stop.is_set():
            roots = watch_roots(kb, base_id)
            if not roots:
                stop.wait(1.0)
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
                    _sync(kb, base_id, prune, on_report)
                if watch_roots(kb, base_id) != roots:
                    break  # a folder came or went: watch the new set
    finally:
        kb.stop_workers()


def _sync(kb: Any, base_id: str, prune: bool | None, on_report: Callable | None) -> None:
    try:
        report = kb.sync(base_id, prune=prune)
        if report.job_id:
            kb.wait([report.job_id])
        if on_report is not None and not report.is_noop:
            on_report(report)
    except Exception:  # a watch outlives one bad sync; the next change tries again
        log.exception("sync of %s failed", base_id)
