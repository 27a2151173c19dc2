"""``knowledge.prepare-root``: expand a directory (or sitemap) into child rows and jobs (§5)."""

from __future__ import annotations

import logging
import posixpath
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.diskspace import as_disk_full, is_disk_full
from knowbase.errors import DiskFull, NoIndexableFiles, OriginMissing
from knowbase.files import choose_directory_prefix, reserve_relative_path
from knowbase.files.staging import Staging
from knowbase.jobs.context import JobContext
from knowbase.operations.add.adopt import Adoption, adopt, standalone_files
from knowbase.operations.common import live_item
from knowbase.operations.indexing.index_batch import BATCH_MAX
from knowbase.operations.purge import active_jobs_touching, purge_rows
from knowbase.operations.scheduling import add_sitemap_pages, schedule_items
from knowbase.pipeline.processing import processable_extensions
from knowbase.runtime import Runtime

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from knowbase.pipeline.sources.directory import ExpandedFile

log = logging.getLogger(__name__)
COPY_THREADS = 8  # staged copies at once (they wait on fsync, not on the CPU)
ROWS_PER_TX = 500  # file rows (and their jobs) per catalog transaction of an expansion
# The first part is one index batch, so indexing starts after 64 copies, not 500; each next
# part doubles, up to ROWS_PER_TX.
FIRST_PART_ROWS = BATCH_MAX


def part_bounds(total: int, largest: int, first: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each part of ``total`` files: ``first`` (at most ``largest``), then
    each twice the one before, up to ``largest``."""
    bounds: list[tuple[int, int]] = []
    start, size = 0, max(1, min(first, largest))
    while start < total:
        end = min(total, start + size)
        bounds.append((start, end))
        start, size = end, min(largest, 2 * size)
    return bounds


def _purge_old_expansion(rt: Runtime, base: Base, item: Item) -> bool:
    """Remove a previous expansion (vectors → files → rows), keeping the root. False if gone."""
    with rt.lock(base.id), rt.catalog.write_tx() as conn:
        current = item_repo.find(conn, item.id)
        if current is None or current.status == "deleting":
            return False
        _purge_expansion_rows(rt, conn, base, item)
        prefix = current.data.get("relative_path")
        if prefix and current.type == "directory":
            rt.storage(base.id).delete_paths([], [prefix])
    return True


def _purge_expansion_rows(rt: Runtime, conn: Connection, base: Base, item: Item) -> None:
    """The rows under ``item`` (not itself), their vectors and files, in the caller's tx."""
    rows = [r for r in item_repo.subtree(conn, [item.id]) if r.id != item.id]
    purge_rows(rt, conn, base, [r for r in rows if r.status != "deleting"])


def prepare_root(rt: Runtime, ctx: JobContext) -> None:
    found = live_item(rt, ctx.payload)
    if found is None:
        return
    base, item = found
    ctx.progress("scanning", 0)
    if not _purge_old_expansion(rt, base, item):
        return
    if item.type == "sitemap":
        _expand_sitemap(rt, ctx, base, item)
    else:
        _expand_directory(rt, ctx, base, item)


def _expand_directory(rt: Runtime, ctx: JobContext, base: Base, item: Item) -> None:
    from knowbase.pipeline.sources.directory import expand
    from knowbase.pipeline.sources.ignore import IgnoreRules

    origin = item.origin or item.source
    if not Path(origin).is_dir():
        raise OriginMissing(f"folder not found: {origin}", path=origin)
    rules = IgnoreRules(max_file_bytes=rt.settings.max_file_bytes, keep_out=rt.settings.keep_out)
    expansion = expand(
        Path(origin),
        rules,
        as_text=tuple(item.data.get("as_text_globs") or ()),
        check_cancelled=ctx.check_cancelled,
    )
    report = expansion.skip_report()
    if not expansion.files:
        with rt.catalog.write_tx() as conn:  # so `kb status` can say what was left out and why
            current = item_repo.find(conn, item.id)
            if current is not None and current.status != "deleting":
                item_repo.update_data(conn, item.id, skipped=report)
        raise NoIndexableFiles("Directory contains no indexable files", path=origin, skipped=report)
    within = _paths_within(expansion.files, processable_extensions(base.file_processor_id))
    with rt.lock(base.id):
        if not ctx.is_current_attempt():
            return  # a cancel or timeout ended this attempt while it walked the folder
        prefix = _pin_prefix(rt, base, item, origin, report)
        if prefix is None:
            return
        # The row owns the prefix from here on: files moved in before their rows (a crash
        # between the two) are purged with the folder by a retry or a delete.
        rt.storage(base.id).delete_paths([], [prefix])  # a crashed earlier attempt's leftovers
    with Staging(rt.storage(base.id)) as staging:
        if not _import_files(rt, ctx, base, item, origin, expansion, prefix, within, staging):
            return
    ctx.progress("done", 100, files=len(expansion.files), skipped=report)


def _copy_all(
    ctx: JobContext, staging: Staging, pairs: list[tuple[Path, str]], done: int, total: int
) -> None:
    """Stage these files, a few at a time: each copy ends with an fsync, which waits on the
    disk, and concurrent fsyncs share the filesystem's journal commits (one by one, 2,000 small
    files took ~9 s here; with 8 at a time ~4x less). Cancels are seen between files; progress
    counts ``done`` files staged before these, of ``total``."""
    todo = iter(pairs)
    with ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="kb-copy") as pool:
        running = {
            pool.submit(staging.copy_to, src, rel) for src, rel in islice(todo, 2 * COPY_THREADS)
        }
        copied = done
        while running:
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                fut.result()
                copied += 1
                if copied % 20 == 0 or copied == total:
                    ctx.progress("copying", 99 * copied / total, copied=copied, total=total)
            ctx.check_cancelled()
            for src, rel in islice(todo, len(finished)):
                running.add(pool.submit(staging.copy_to, src, rel))


def _pin_prefix(rt: Runtime, base: Base, item: Item, origin: str, report: dict) -> str | None:  # type: ignore[type-arg]
    """Choose (or keep) the folder's raw/ prefix and record it on the row; None if deleted."""
    storage = rt.storage(base.id)
    with rt.catalog.write_tx() as conn:
        current = item_repo.find(conn, item.id)
        if current is None or current.status == "deleting":
            return None
        prefix = current.data.get("relative_path")
        if not prefix:
            reserved = item_repo.reserved_relative_paths(
                conn, base.id, processes=False, exclude_item_id=item.id
            )
            # A folder on disk that no row owns (a crash mid-copy) must not be reused.
            if storage.raw.is_dir():
                reserved.update(p.name for p in storage.raw.iterdir())
            prefix = choose_directory_prefix(origin, reserved)
        item_repo.update_data(conn, item.id, relative_path=prefix, skipped=report)
    return str(prefix)


def _import_files(  # type: ignore[no-untyped-def]
    rt: Runtime,
    ctx: JobContext,
    base: Base,
    item: Item,
    origin: str,
    expansion,
    prefix: str,
    within: dict[str, str],
    staging: Staging,
) -> bool:
    """Every directory and file row of the expansion, and their jobs, in parts
    (:func:`part_bounds`: one index batch first, then up to :data:`ROWS_PER_TX` files): stage
    the files (no lock), then, under the base lock, move them into raw/ and write their rows
    and jobs in one transaction. False when a cancel, a timeout or a delete of the folder
    ended it between two parts.

    The first files index while the rest are copied (staging all 100k files of a folder
    before its first row took a third of the import). One transaction for a 100k-file folder
    held SQLite's only writer for minutes: no heartbeat could renew a lease meanwhile, so this
    very job's lease lapsed and the sweep failed the whole folder it had just written. The
    folders stay ``preparing`` (the roll-up leaves that state alone) until the last
    transaction moves them to ``processing`` and derives their real status from the children,
    some of which may have finished by then. An error takes back what earlier transactions
    wrote; a crash in between abandons the job like any crash mid-expansion (its settling
    fails the rows written; a retry of the folder purges them and the prefix).
    """
    storage = rt.storage(base.id)
    dir_ids = {"": item.id}
    files = expansion.files
    committed = False
    alone: dict[str, tuple[Item, ExpandedFile]] = {}  # files the base holds alone: adopted
    try:
        for start, end in part_bounds(len(files), ROWS_PER_TX, FIRST_PART_ROWS):
            part = files[start:end]
            _copy_all(ctx, staging, [(f.abs_path, within[f.rel]) for f in part], start, len(files))
            with rt.lock(base.id), rt.catalog.write_tx() as conn:
                if not ctx.is_current_attempt(conn):
                    return False  # cancelled or timed out: settling it fails what was written
                current = item_repo.find(conn, item.id)
                if current is None or current.status == "deleting":
                    return False  # deleted between two parts: its delete purges what was written
                storage.move_files_in(staging.tree, prefix, [within[f.rel] for f in part])
                if start == 0:
                    _insert_dirs(conn, base, origin, expansion, dir_ids)
                _write_part(rt, conn, ctx, base, part, _Tree(dir_ids, prefix, within), alone)
            committed = True
            done = end
            ctx.progress("enqueuing", 99 * done / len(files), files=len(files), enqueued=done)
        _settle_folders(rt, ctx, base, _Tree(dir_ids, prefix, within), alone)
        return True
    except BaseException as exc:
        full = is_disk_full(exc)
        if full:
            # The staged copies of the failed part go first: the writes below need their room.
            staging.close()
        with rt.lock(base.id):
            if committed:  # an earlier transaction went through: take its rows back
                _purge_children(rt, base, item, ctx.job.id)
            storage.delete_paths([], [prefix])  # and the files moved in for them
        if full:
            # The folder fails whole, for good (issue 37): a retry a few seconds later meets
            # the same full disk, and the waiting `kb add` has already said disk_full and gone;
            # left queued, the folder would sit `preparing` for a worker nobody runs.
            # `kb retry` imports it again once space is back.
            raise _final(as_disk_full(exc)) from exc
        raise


@dataclass(frozen=True)
class _Tree:
    """Where an expansion's files go: each folder's item id by relative path, the Concept ID
    prefix, and each file's path below it."""

    dir_ids: dict[str, str]
    prefix: str
    within: dict[str, str]


def _write_part(
    rt: Runtime,
    conn: Connection,
    ctx: JobContext,
    base: Base,
    part: list[ExpandedFile],
    tree: _Tree,
    alone: dict[str, tuple[Item, ExpandedFile]],
) -> None:
    """One part's rows and jobs: a file the base already holds as an item of its own is set
    aside in ``alone`` (the folder adopts it at the end); the rest take one multi-row INSERT
    of items and one of jobs."""
    held = standalone_files(conn, base.id, [str(f.abs_path) for f in part])
    alone.update((f.rel, (held[str(f.abs_path)], f)) for f in part if str(f.abs_path) in held)
    rows = [
        (
            tree.dir_ids[posixpath.dirname(f.rel)],
            str(f.abs_path),
            {
                "source": str(f.abs_path),
                "relative_path": f"{tree.prefix}/{tree.within[f.rel]}",
                **({"as_text": True} if f.as_text else {}),
            },
        )
        for f in part
        if f.rel not in alone
    ]
    leaves = item_repo.insert_active_many(conn, base_id=base.id, type="file", rows=rows)
    schedule_items(rt, conn, base, leaves, parent_job_id=ctx.job.id)


def _settle_folders(
    rt: Runtime,
    ctx: JobContext,
    base: Base,
    tree: _Tree,
    alone: dict[str, tuple[Item, ExpandedFile]],
) -> None:
    """The expansion's last transaction: adopt the files the base held alone, move the
    folders from ``preparing`` to ``processing`` and derive their status from their children;
    then delete the adopted items' old copies (the folder's replace them)."""
    dir_ids = tree.dir_ids
    with rt.lock(base.id), rt.catalog.write_tx() as conn:
        adopted, old_copies = adopt(conn, _adoptions(alone, dir_ids, tree.prefix, tree.within))
        schedule_items(rt, conn, base, adopted, parent_job_id=ctx.job.id)
        item_repo.set_statuses_raw(conn, list(dir_ids.values()), "processing")
        # Deepest first: each walk up re-derives the ancestors after their subfolders.
        for rel in sorted(dir_ids, key=lambda r: -1 if r == "" else r.count("/"), reverse=True):
            item_repo.reconcile_containers(conn, dir_ids[rel])
    with rt.lock(base.id):
        for problem in rt.storage(base.id).delete_paths(old_copies):
            log.warning("adopted file's old copy: %s", problem)


def _adoptions(
    alone: dict[str, tuple[Item, ExpandedFile]],
    dir_ids: dict[str, str],
    prefix: str,
    within: dict[str, str],
) -> list[Adoption]:
    """What :func:`adopt` moves: each file the base held alone, under its folder's row."""
    return [
        Adoption(
            item.id,
            dir_ids[posixpath.dirname(rel)],
            str(f.abs_path),
            f"{prefix}/{within[rel]}",
            as_text=bool(f.as_text),
        )
        for rel, (item, f) in alone.items()
    ]


def _insert_dirs(  # type: ignore[no-untyped-def]
    conn: Connection, base: Base, origin: str, expansion, dir_ids: dict[str, str]
) -> None:
    """The expansion's folder rows (``preparing`` until the last file is in), parents first."""
    for d in expansion.dirs:
        row = item_repo.insert_active(
            conn,
            base_id=base.id,
            type="directory",
            group_id=dir_ids[posixpath.dirname(d.rel)],
            reconcile=False,
            data={"source": str(Path(origin) / d.rel)},
        )
        dir_ids[d.rel] = row.id


def _purge_children(rt: Runtime, base: Base, item: Item, job_id: str) -> None:
    """Remove what earlier transactions of a failed expansion wrote (the caller holds the base
    lock), so a failed folder has no half-created children, and cancel their jobs (job
    ``job_id``, this expansion, excepted): left queued they would wait for work that can never
    run."""
    try:
        # Open the index before the transaction: an open that fails may write the base's
        # status, which would wait on this very transaction's lock ("database is locked").
        rt.store_if_exists(base)
        with rt.catalog.write_tx() as conn:
            ids = [r.id for r in item_repo.subtree(conn, [item.id]) if r.id != item.id]
            _purge_expansion_rows(rt, conn, base, item)
        # Cancelling never waits here (the base lock is held): pending jobs end at once,
        # running ones at their next cancel check.
        rt.jobs.cancels.request_cancel(
            active_jobs_touching(rt, base.id, ids, exclude_job_id=job_id)
        )
    except Exception as exc:  # the original error is what the job reports; a retry purges again
        if is_disk_full(exc):
            log.error("could not remove the partial expansion of item %s: %s", item.id, exc)
        else:
            log.exception("could not remove the partial expansion of item %s", item.id)


def _final(exc: DiskFull) -> DiskFull:
    """``exc`` marked so that its job fails now instead of retrying (:func:`jobs.retry.decide`)."""
    exc.details["final"] = True
    return exc


def _paths_within(files: list[ExpandedFile], processable: frozenset[str]) -> dict[str, str]:
    """Path of each expanded file inside the folder's raw/ prefix: its own ``rel``, except that
    with a processor a PDF or image whose ``<stem>.md`` slot is taken (``a.md`` beside
    ``a.pdf``) gets ``_N``, as a single add does; otherwise its OCR artifact would overwrite
    the other file's copy."""
    paths = {f.rel: f.rel for f in files}
    if not processable:
        return paths
    taken = set(paths.values())
    for f in files:
        if posixpath.splitext(f.rel)[1].lower() in processable:
            taken.discard(paths[f.rel])
            paths[f.rel] = reserve_relative_path(paths[f.rel], taken, reserve_artifact=True)
    return paths


def _expand_sitemap(rt: Runtime, ctx: JobContext, base: Base, item: Item) -> None:
    from knowbase.pipeline.sources.sitemap import fetch_sitemap

    urls = fetch_sitemap(
        item.data["url"], allow_local=base.allow_local_urls or rt.settings.allow_local_urls
    )
    if not urls:
        raise NoIndexableFiles("Sitemap lists no pages", url=item.data["url"])
    with rt.lock(base.id), rt.catalog.write_tx() as conn:
        current = item_repo.find(conn, item.id)
        if current is None or current.status == "deleting":
            return
        add_sitemap_pages(rt, conn, base, item.id, dict.fromkeys(urls), ctx.job.id)
        item_repo.set_statuses_raw(conn, [item.id], "processing")
    ctx.progress("done", 100, pages=len(urls))
