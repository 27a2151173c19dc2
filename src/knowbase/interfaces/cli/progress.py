"""``follow``: wait for queued work with progress (files, chunks, rate, ETA), and the summary.

On a terminal one bar counts the files of the added items (jobs when there are none); on a
base with a model the line also counts chunks embedded, the real work, and estimates from
their rate (issue 42). Piped, one line every :data:`PIPED_EVERY_S` at most says the same, so
``kb add … | tee`` is never silent for minutes nor floods the log. Before a long import,
:func:`say_cost` says what it will cost. Worker log lines do not reach the console meanwhile:
the outcome is the summary.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from knowbase import Base, Item
    from knowbase.service import Knowledge

err_console = Console(stderr=True)
PIPED_EVERY_S = 5.0
RATE_AFTER_S = 10.0  # the chunks/s seen over this long replace the one measured before
LONG_IMPORT_S = 30.0  # an import estimated to embed this long is announced with its cost


@dataclass
class FileCount:
    """The files under some roots: how many there are and how many have ended."""

    total: int = 0
    done: int = 0
    failed: int = 0

    @staticmethod
    def of(items: list[Item]) -> FileCount:
        leaves = [i for i in items if not i.is_container]
        ended = [i for i in leaves if i.status in ("completed", "failed")]
        return FileCount(len(leaves), len(ended), sum(i.status == "failed" for i in ended))


def rate_eta(done: int, total: int, elapsed_s: float) -> str:
    """``12.3 files/s, ~31 s left`` once something ended; '' before."""
    if done <= 0 or elapsed_s <= 0:
        return ""
    rate = done / elapsed_s
    if done >= total:
        return f"{rate:.1f} files/s"
    left = max(total - done, 0) / rate if rate else 0
    return f"{rate:.1f} files/s, ~{_duration(left)} left"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 90:
        return f"{seconds} s"
    minutes, s = divmod(seconds, 60)
    return f"{minutes} min {s:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


@contextmanager
def quiet_worker_logs() -> Iterator[None]:
    """Keep worker log records off the terminal while a command waits (they are summarised)."""
    logger = logging.getLogger("knowbase")
    handler = logging.NullHandler()
    old = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = old


def follow(
    kb: Knowledge,
    base_id: str,
    job_ids: list[str],
    *,
    quiet: bool = False,
    root_ids: list[str] | None = None,
    rate: float | None = None,
) -> None:
    """Run workers here until every job tree in ``job_ids`` has ended, showing progress.

    With ``root_ids`` progress counts those items' files (and, on a base with a model, the
    chunks embedded); otherwise jobs. ``rate``: chunks/s measured before, the estimate's
    rate until the import's own is seen.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    if not job_ids:
        return
    kb.start_workers()
    started = time.monotonic()
    piped = not err_console.is_terminal
    last_line = started
    embeds = bool(kb.get_base(base_id).embedding_model_id)
    first: dict[str, Any] = {"embeds": embeds, "job_ids": job_ids, "probe_rate": rate}
    with quiet_worker_logs():
        try:
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=err_console,
                disable=quiet or piped,
                transient=False,
            ) as progress:
                task = progress.add_task("queued", total=1, detail="")
                while True:
                    asked = time.monotonic()
                    tree = kb.activity.job_tree(job_ids)
                    running = any(not j.is_terminal for j in tree)
                    line, done, total = _progress_line(kb, base_id, tree, root_ids, started, first)
                    progress.update(task, description=line[0], completed=done, total=max(total, 1))
                    progress.update(task, detail=line[1])
                    now = time.monotonic()
                    if piped and not quiet and (not running or now - last_line >= PIPED_EVERY_S):
                        err_console.print(f"{line[0]} {line[1]}".strip(), highlight=False)
                        last_line = now
                    # A full disk ends the wait with disk_full (issue 26), also when it ended
                    # the work itself (a folder it stopped mid-import fails whole, issue 37).
                    kb.check_workers()
                    if not running:
                        break
                    # Each poll walks the job tree and the files: bound it to a tenth of the time.
                    time.sleep(max(0.3, 9 * (time.monotonic() - asked)))
        finally:
            # Still quiet: handlers that end while the workers stop (a folder import taking
            # back its rows after a full disk) would print their lines and tracebacks ahead
            # of the one message the command ends with.
            kb.stop_workers()


def _progress_line(
    kb: Knowledge,
    base_id: str,
    tree: list[Any],
    root_ids: list[str] | None,
    started: float,
    first: dict[str, Any],
) -> tuple[tuple[str, str], int, int]:
    elapsed = time.monotonic() - started
    if root_ids:
        count = FileCount.of(kb.subtree(base_id, root_ids))
        if count.total:
            failed = f", {count.failed} failed" if count.failed else ""
            head = f"files {count.done}/{count.total}{failed}"
            # The rate counts what ended while we watched: an update starts with its files done.
            base = first.setdefault("done", count.done)
            if first.get("embeds"):
                detail = _chunk_detail(kb, first["job_ids"], count.total - base, first)
                return (head, detail), count.done, count.total
            rate = rate_eta(count.done - base, count.total - base, elapsed)
            return (head, rate), count.done, count.total
    ended = sum(1 for j in tree if j.is_terminal)
    live = [j for j in tree if not j.is_terminal]
    stage = (live[-1].progress_stage or live[-1].status) if live else "done"
    if first.get("embeds") and live:
        stage = f"{stage} · {_chunk_detail(kb, first['job_ids'], 0, first)}"
    return (f"jobs {ended}/{len(tree)}", stage), ended, len(tree)


def _chunk_detail(kb: Knowledge, job_ids: list[str], files: int, first: dict[str, Any]) -> str:
    """``chunks 410/≈4,000 embedded · 5.6 chunks/s, ~11 min left``: the real work of a base
    with a model is its chunks; the rate counts from the first chunks seen done, so loading
    the model and reading files do not make it look slow (issue 42)."""
    progress = kb.activity.chunk_progress(job_ids)
    total = progress.estimated_total(files)
    done = progress.chunks_done
    if not progress.files_chunked:
        return "reading and chunking"
    approx = "" if progress.files_chunked + progress.files_failed >= files else "≈"
    text = f"chunks {done:,}/{approx}{total:,} embedded"
    now = time.monotonic()
    mark = first.get("chunks_at")
    if done and mark is None:
        first["chunks_at"] = (now, done)
    last = first.get("chunks_last")
    if last is None or done > last[1]:
        first["chunks_last"] = last = (now, done)
    # The import's own rate once it has run a while; the measured one (or none) before.
    # Chunks arrive in runs (64 at a time): the rate is measured between the first and the
    # latest run seen, so it does not sag while the next run embeds; the wait since the
    # latest run comes off the time left.
    rate: float | None = first.get("probe_rate")
    if mark is not None and last[1] > mark[1] and (last[0] - mark[0] >= RATE_AFTER_S or not rate):
        rate = (last[1] - mark[1]) / (last[0] - mark[0])
    since = now - last[0] if last[1] > (mark or (0, 0))[1] else 0.0
    if rate:
        text += f" · {rate:.1f} chunks/s"
        if done < total:
            text += f", ~{_duration(max((total - done) / rate - since, 1))} left"
    return text


def say_cost(kb: Knowledge, base: Base, items: list[Item]) -> float | None:
    """Before a long import (:data:`LONG_IMPORT_S` or more), on stderr: chunks, minutes at
    this machine's rate, and the way out (a BM25-only base now, embeddings later). Returns
    the measured rate in chunks/s (None: not measured)."""
    paths = [i.origin for i in items if i.origin and not i.origin.startswith(("http:", "https:"))]
    cost = kb.import_cost(base, paths)
    if cost is None:
        return None
    if cost.seconds >= LONG_IMPORT_S:
        err_console.print(
            f"This import will embed ≈ {cost.chunks:,} chunks from {cost.files:,} file(s): "
            f"≈ {_duration(cost.seconds)} at this machine's rate ({cost.rate:.1f} chunks/s with "
            f"{cost.model_id}). A BM25-only base is ready in seconds, and embeddings can be "
            f"enabled later (kb base enable-embedding {base.name} {cost.model_id}).",
            highlight=False,
            soft_wrap=True,
        )
    return cost.rate


@dataclass
class AddSummary:
    """What an add (or a re-add's update) ended with, over every file under its roots."""

    indexed: int = 0
    active: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> files left out
    skipped_files: dict[str, list[str]] = field(default_factory=dict)  # reason -> their paths
    failed: list[dict[str, Any]] = field(default_factory=list)  # {item_id, source, code, message}
    # names that are not UTF-8, their bytes escaped (a person must find and rename them)
    undecodable: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "indexed": self.indexed,
            "active": self.active,
            "skipped": self.skipped,
            "skipped_files": self.skipped_files,
            "failed": self.failed,
        }
        if self.undecodable:
            out["undecodable"] = self.undecodable
        return out


def summarize(items: list[Item]) -> AddSummary:
    """Count the leaves of a subtree (roots included): indexed, still active, skipped, failed.

    A container's own failure counts only when it is not just its children's (``child_failed``):
    a folder with no indexable files, a refused URL.
    """
    out = AddSummary()
    for item in items:
        for reason, entry in (item.data.get("skipped") or {}).items():
            out.skipped[reason] = out.skipped.get(reason, 0) + int(entry.get("count", 0))
            root = item.origin or item.source or ""
            out.skipped_files.setdefault(reason, []).extend(
                f"{root.rstrip('/')}/{rel}" if root else rel
                # "examples": the first five, as skip reports before issue 41 kept them
                for rel in entry.get("files") or entry.get("examples") or []
            )
            if reason == "undecodable_name":
                out.undecodable.extend(
                    str(e) for e in entry.get("files") or entry.get("examples") or []
                )
        if item.status == "failed" and (not item.is_container or item.error_code != "child_failed"):
            out.failed.append(
                {
                    "item_id": item.id,
                    "source": item.origin or item.source,
                    "code": item.error_code,
                    "message": item.error_message,
                }
            )
        elif item.is_container:
            continue
        elif item.status == "completed":
            out.indexed += 1
        elif item.status != "failed":
            out.active += 1
    return out
