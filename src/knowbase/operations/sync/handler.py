"""``knowledge.sync``: apply a sync plan (``sync/workflow.py``) as one job tree (issue 15).

Pages due a refresh are fetched first, outside the lock, with a conditional GET; a 304 or an
unchanged body only records the fetch. Then one transaction under the base lock does the rest:
new files become rows (their index jobs copy them from the origin), changed files are reset and
re-acquired in place (same item, same Concept ID; unchanged chunks keep their vectors by text
hash), pruned rows are marked ``deleting`` with their purge job. Every step re-checks the row,
because the plan was made before the job ran: a row that moved, a file that came back or a
file some other sync already added is left alone, so overlapping syncs never duplicate and a
delete is never undone. A crash before the commit leaves nothing; after it, the children are
ordinary index / delete jobs that recover as any import does.
"""

from __future__ import annotations

import logging
import posixpath
import time
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.errors import KnowbaseError
from knowbase.files import reserve_relative_path
from knowbase.jobs.context import JobContext
from knowbase.operations import kinds
from knowbase.operations.scheduling import add_sitemap_pages, schedule_item
from knowbase.operations.sync.workflow import FETCHED_KEY, STAMP_KEY
from knowbase.runtime import Runtime, queue_of

log = logging.getLogger(__name__)

PAGE_HASH_KEY = "page_sha256"  # item data: hash of the page body its snapshot holds


def sync_apply(rt: Runtime, ctx: JobContext) -> None:
    base_id = ctx.payload["base_id"]
    with rt.catalog.read() as conn:
        base = base_repo.find(conn, base_id)
    if base is None or base.status == "failed":
        return
    ctx.progress("fetching", 0, pages=len(ctx.payload.get("pages", [])))
    pages = _fetch_pages(rt, ctx, base, ctx.payload.get("pages", []))
    listed = _read_sitemaps(rt, ctx, base, ctx.payload.get("sitemaps", []))
    counts = {"added": 0, "changed": 0, "pruned": 0, "pages_changed": 0, "pages_added": 0}
    dropped: list[str] = []
    with rt.lock(base.id), rt.catalog.write_tx() as conn:
        if base_repo.find(conn, base.id) is None:
            return
        for scope in ctx.payload.get("scopes", []):
            counts["added"] += _add_files(rt, conn, base, ctx.job.id, scope)
            counts["changed"] += _reindex(rt, conn, base, ctx.job.id, scope.get("changed", []))
        counts["pages_changed"] = _apply_pages(rt, conn, base, ctx.job.id, pages)
        counts["pages_added"], dropped = _apply_sitemaps(rt, conn, base, ctx.job.id, listed)
    counts["pages_dropped"] = len(dropped)
    prune = [i for scope in ctx.payload.get("scopes", []) for i in scope.get("prune", [])]
    if ctx.payload.get("prune"):
        prune += dropped
    if prune:
        # Purge only once the new copies are indexed: a renamed file's chunks then find their
        # vectors by text hash instead of racing the purge's embedding GC.
        _wait_for_children(rt, ctx)
        with rt.lock(base.id), rt.catalog.write_tx() as conn:
            counts["pruned"] = _prune(conn, base, ctx.job.id, prune, rt)
    summary = {k: v["outcome"] for k, v in pages.items()}
    summary.update({k: v["outcome"] for k, v in listed.items()})
    ctx.progress("done", 100, **counts, pages=summary)


def _wait_for_children(rt: Runtime, ctx: JobContext) -> None:
    while True:
        live = [
            j
            for j in rt.jobs.queries.tree([ctx.job.id])
            if j.id != ctx.job.id and not j.is_terminal
        ]
        if not live:
            return
        ctx.progress("indexing", 60, waiting=len(live))
        ctx.check_cancelled()
        time.sleep(0.2)


# --- files ---------------------------------------------------------------------------------
def _as_text(root: Item, rel: str) -> dict[str, bool]:
    """``{"as_text": True}`` for a new file that the folder's ``kb add --as-text`` globs name."""
    from knowbase.pipeline.sources.directory import matches_globs

    globs = tuple(root.data.get("as_text_globs") or ())
    return {"as_text": True} if globs and matches_globs(rel, globs) else {}


def _add_files(rt: Runtime, conn: Connection, base: Base, job_id: str, scope: dict) -> int:
    root_id = scope.get("root_id")
    if not root_id or not scope.get("added"):
        return 0
    root = item_repo.find(conn, root_id)
    if root is None or root.status in ("deleting", "preparing") or not root.origin:
        return 0
    prefix = root.data.get("relative_path")
    if not prefix:
        return 0  # never expanded: a reindex of the folder is what it needs
    rows = item_repo.subtree(conn, [root.id])
    held = {r.origin for r in rows if r.type == "file" and r.origin}  # deleting rows too
    dir_ids = {"": root.id}
    for r in rows:
        if r.type == "directory" and r.id != root.id and r.status != "deleting":
            dir_ids[posixpath.join(*Path(r.source).relative_to(root.origin).parts)] = r.id
    reserved = item_repo.reserved_relative_paths(conn, base.id, processes=False)
    new_dirs: list[str] = []
    added = 0
    for rel in scope["added"]:
        origin = str(Path(root.origin) / rel)
        if origin in held or not Path(origin).is_file():
            continue  # added by an overlapping sync, or gone again since the plan
        parent = _ensure_dirs(conn, base, root, dir_ids, posixpath.dirname(rel), new_dirs)
        path = reserve_relative_path(f"{prefix}/{rel}", reserved)
        reserved.add(path)
        leaf = item_repo.insert_active(
            conn,
            base_id=base.id,
            type="file",
            group_id=parent,
            reconcile=False,
            origin=origin,
            data={"source": origin, "relative_path": path, **_as_text(root, rel)},
        )
        # reacquire: the index job copies the file in, outside this transaction's lock hold.
        schedule_item(rt, conn, base, leaf, parent_job_id=job_id, reacquire=True)
        held.add(origin)
        added += 1
    item_repo.set_statuses_raw(conn, new_dirs, "processing")
    if added:
        for dir_id in set(dir_ids.values()):
            item_repo.reconcile_containers(conn, dir_id)
    return added


def _ensure_dirs(
    conn: Connection, base: Base, root: Item, dir_ids: dict[str, str], rel: str, new: list[str]
) -> str:
    """The row of folder ``rel`` under ``root``, creating it (and its parents) when missing."""
    if rel in dir_ids:
        return dir_ids[rel]
    parent = _ensure_dirs(conn, base, root, dir_ids, posixpath.dirname(rel), new)
    row = item_repo.insert_active(
        conn,
        base_id=base.id,
        type="directory",
        group_id=parent,
        reconcile=False,
        data={"source": str(Path(str(root.origin)) / rel)},
    )
    dir_ids[rel] = row.id
    new.append(row.id)
    return row.id


def _reindex(rt: Runtime, conn: Connection, base: Base, job_id: str, item_ids: list[str]) -> int:
    done = 0
    for item in item_repo.find_many(conn, item_ids).values():
        if item.status not in ("completed", "failed") or item.is_container:
            continue  # moved since the plan: its own job decides
        # The old stamp described the old copy; the next sync hashes the new one.
        item_repo.update_data(conn, item.id, **{STAMP_KEY: None})
        item_repo.set_status(conn, item.id, "processing")
        schedule_item(
            rt, conn, base, item_repo.get(conn, item.id), parent_job_id=job_id, reacquire=True
        )
        done += 1
    return done


def _prune(conn: Connection, base: Base, job_id: str, item_ids: list[str], rt: Runtime) -> int:
    rows = item_repo.find_many(conn, item_ids)
    doomed = []
    for item in rows.values():
        if item.status == "deleting":
            continue
        if not item.is_container and item.status not in ("completed", "failed"):
            continue  # still indexing: the next sync decides
        path = item.origin if item.type == "file" else item.source
        if path and Path(path).exists() and (not item.is_container or _holds_files(rt, path)):
            continue  # it came back since the plan
        doomed.append(item)
    ids = {i.id for i in doomed}
    roots = [i.id for i in doomed if i.group_id not in ids]
    if not roots:
        return 0
    item_repo.mark_deleting(conn, roots)
    for parent in {i.group_id for i in doomed if i.id in roots and i.group_id}:
        item_repo.reconcile_containers(conn, parent)
    rt.jobs.enqueuer.enqueue(
        conn,
        kinds.DELETE_SUBTREE.name,
        {"base_id": base.id, "root_item_ids": roots},
        queue=queue_of(base.id),
        idempotency_key=kinds.delete_key(base.id, roots),
        parent_id=job_id,
    )
    return len(roots)


def _holds_files(rt: Runtime, path: str) -> bool:
    """Whether the folder at ``path`` holds a file a sync would index. A folder that lost
    every such file is vanished to the plan (``workflow._folder_scope``) even while it
    exists: judging it by existence alone kept it, and every later sync listed it again
    "(kept; --prune)" (issue 42)."""
    from knowbase.pipeline.sources.directory import expand
    from knowbase.pipeline.sources.ignore import IgnoreRules

    try:
        found = expand(Path(path), IgnoreRules(max_file_bytes=rt.settings.max_file_bytes))
    except (OSError, KnowbaseError):
        return False
    return bool(found.files)


# --- pages ---------------------------------------------------------------------------------
def _fetch_pages(rt: Runtime, ctx: JobContext, base: Base, item_ids: list[str]) -> dict:
    """{item_id: {outcome, page?}} — outcome not_modified | same | changed | failed: reason."""
    from knowbase.pipeline.sources.url import fetch_page

    with rt.catalog.read() as conn:
        items = item_repo.find_many(conn, item_ids)
    out: dict[str, dict[str, Any]] = {}
    allow_local = base.allow_local_urls or rt.settings.allow_local_urls
    for n, item in enumerate(items.values(), 1):
        ctx.check_cancelled()
        url = item.origin or item.data.get("url")
        validators = {k: item.data[k] for k in ("etag", "last_modified") if item.data.get(k)}
        try:
            page = fetch_page(str(url), allow_local=allow_local, validators=validators)
        except KnowbaseError as exc:
            out[item.id] = {"outcome": f"failed: {exc.code}"}
            continue
        if page.not_modified:
            out[item.id] = {"outcome": "not_modified", "page": page}
        elif _text_hash(page.markdown) == _held_page_hash(rt, base, item):
            out[item.id] = {"outcome": "same", "page": page}
        else:
            out[item.id] = {"outcome": "changed", "page": page}
        ctx.progress("fetching", 50 * n / max(1, len(items)))
    return out


def _text_hash(text: str) -> str:
    from knowbase.units.hashing import text_hash

    return text_hash(text)


def _held_page_hash(rt: Runtime, base: Base, item: Item) -> str | None:
    if item.data.get(PAGE_HASH_KEY):
        return str(item.data[PAGE_HASH_KEY])
    from knowbase.pipeline.sources.okf import strip_okf_frontmatter

    try:
        text = rt.storage(base.id).path_of(str(item.relative_path)).read_text(encoding="utf-8")
    except OSError:
        return None
    return _text_hash(strip_okf_frontmatter(text).strip())


def _apply_pages(rt: Runtime, conn: Connection, base: Base, job_id: str, pages: dict) -> int:
    from knowbase.operations.common import iso_now
    from knowbase.pipeline.sources.okf import serialize_okf

    changed = 0
    now = int(rt.clock() * 1000)
    for item_id, result in pages.items():
        page = result.get("page")
        item = item_repo.find(conn, item_id)
        if page is None or item is None or item.status not in ("completed", "failed"):
            continue
        fields: dict[str, Any] = {FETCHED_KEY: now}
        if page.etag or page.last_modified or not page.not_modified:
            fields.update(etag=page.etag, last_modified=page.last_modified)
        if result["outcome"] == "changed" and item.relative_path:
            url = item.origin or item.data.get("url")
            text = serialize_okf(
                page.markdown,
                type_="URL",
                title=page.title,
                resource=url,
                timestamp=iso_now(rt.clock),
            )
            rt.storage(base.id).write_text(item.relative_path, text, overwrite=True)
            fields[PAGE_HASH_KEY] = _text_hash(page.markdown)
            if page.title:
                fields["title"] = page.title
            item_repo.update_data(conn, item_id, **fields)
            item_repo.set_status(conn, item_id, "processing")
            schedule_item(rt, conn, base, item_repo.get(conn, item_id), parent_job_id=job_id)
            changed += 1
        else:
            if result["outcome"] == "same":
                fields[PAGE_HASH_KEY] = _text_hash(page.markdown)
            item_repo.update_data(conn, item_id, **fields)
    return changed


# --- sitemaps ------------------------------------------------------------------------------
def _read_sitemaps(rt: Runtime, ctx: JobContext, base: Base, item_ids: list[str]) -> dict:
    """{sitemap item id: {outcome, urls?}} — fetched outside the lock, like pages."""
    from knowbase.pipeline.sources.sitemap import fetch_sitemap

    with rt.catalog.read() as conn:
        items = item_repo.find_many(conn, item_ids)
    allow_local = base.allow_local_urls or rt.settings.allow_local_urls
    out: dict[str, dict[str, Any]] = {}
    for item in items.values():
        ctx.check_cancelled()
        try:
            urls = fetch_sitemap(str(item.data.get("url") or item.origin), allow_local=allow_local)
        except KnowbaseError as exc:
            out[item.id] = {"outcome": f"failed: {exc.code}"}
            continue
        out[item.id] = {"outcome": "read", "urls": list(dict.fromkeys(urls))}
    return out


def _apply_sitemaps(
    rt: Runtime, conn: Connection, base: Base, job_id: str, listed: dict
) -> tuple[int, list[str]]:
    """Add the pages a sitemap gained (not those a user deleted); return (added, the ids of
    pages it no longer lists). An empty listing is never read as "every page dropped"."""
    from knowbase.operations.delete.workflow import SYNC_EXCLUDED_KEY

    added, dropped = 0, []
    now = int(rt.clock() * 1000)
    for sitemap_id, result in listed.items():
        urls = result.get("urls")
        item = item_repo.find(conn, sitemap_id)
        if not urls or item is None or item.status not in ("completed", "failed"):
            continue
        children = [
            r for r in item_repo.subtree(conn, [item.id]) if r.id != item.id and r.type == "url"
        ]
        held = {str(r.origin) for r in children}  # deleting rows too
        excluded = set(item.data.get(SYNC_EXCLUDED_KEY) or [])
        new = [u for u in urls if u not in held and u not in excluded]
        add_sitemap_pages(rt, conn, base, item.id, new, job_id)
        listed_now = set(urls)
        gone = [r.id for r in children if r.status != "deleting" and r.origin not in listed_now]
        dropped += gone
        result["outcome"] = f"{len(new)} added, {len(gone)} no longer listed"
        item_repo.update_data(conn, item.id, **{FETCHED_KEY: now})
        if new:
            item_repo.reconcile_containers(conn, item.id)
        added += len(new)
    return added, dropped
