"""Capture and re-acquire the material of url / note / file items (the I/O around indexing).

Producing content (fetching, reading the origin) happens outside the base lock; writing it into
raw/ and recording the path happens inside (§4.1 "Snapshots", DESIGN improvement 1).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.errors import EmptyContent, OriginMissing, Unavailable
from knowbase.files import note_snapshot_slug, reserve_free_path, url_snapshot_slug
from knowbase.operations.common import iso_now
from knowbase.runtime import Runtime

log = logging.getLogger(__name__)


def _note_body(rt: Runtime, item: Item) -> tuple[str, str]:
    content = item.data.get("content") or ""
    if not content.strip():
        raise EmptyContent("the note is empty", item_id=item.id)
    from knowbase.pipeline.sources.okf import serialize_okf

    title = next((ln.strip() for ln in item.source.splitlines() if ln.strip()), "") or None
    text = serialize_okf(content, type_="Note", title=title, timestamp=iso_now(rt.clock))
    return note_snapshot_slug(item.source), text


def _url_body(rt: Runtime, base: Base, item: Item) -> tuple[str, str, str | None]:
    from knowbase.pipeline.sources.okf import serialize_okf
    from knowbase.pipeline.sources.url import fetch_page

    url = item.data["url"]
    page = fetch_page(url, allow_local=base.allow_local_urls or rt.settings.allow_local_urls)
    if not page.markdown.strip():
        raise EmptyContent(f"the page {url} has no text", url=url)
    text = serialize_okf(
        page.markdown, type_="URL", title=page.title, resource=url, timestamp=iso_now(rt.clock)
    )
    return url_snapshot_slug(page.title, page.markdown, url), text, page.title


def ensure_snapshot(rt: Runtime, base: Base, item: Item, *, refresh: bool = False) -> Item:
    """Write the url/note snapshot on first index (or again with ``refresh``); return the row."""
    if item.type not in ("url", "note") or (item.relative_path and not refresh):
        return item
    title: str | None = None
    if item.type == "note":
        slug, text = _note_body(rt, item)
    else:
        try:
            slug, text, title = _url_body(rt, base, item)
        except (OriginMissing, Unavailable) as exc:
            if not (refresh and item.relative_path):
                raise
            # DESIGN improvement 1: a page that is gone (404/410, or the server unreachable)
            # never fails a reindex; the item is rebuilt from its snapshot and says so.
            log.warning("keeping the snapshot of %s: %s", item.data.get("url"), exc)
            with rt.catalog.write_tx() as conn:
                return item_repo.update_data(conn, item.id, warning="origin_missing")
    storage = rt.storage(base.id)
    with rt.lock(base.id), rt.catalog.write_tx() as conn:
        current = item_repo.find(conn, item.id)
        if current is None or current.status == "deleting":
            return item
        if current.relative_path and not refresh:
            return current  # another job captured it meanwhile
        if current.relative_path:
            storage.write_text(current.relative_path, text, overwrite=True)
            rel = current.relative_path
        else:
            reserved = item_repo.reserved_relative_paths(conn, base.id, processes=False)
            rel = reserve_free_path(storage, f"{slug}.md", reserved)
            storage.write_text(rel, text)
        fields: dict[str, str | None] = {"relative_path": rel}
        if title:
            fields["title"] = title
        if refresh and current.data.get("warning"):
            fields["warning"] = None  # the origin answered again
        return item_repo.update_data(conn, item.id, **fields)


def reacquire_file(rt: Runtime, base: Base, item: Item) -> tuple[Item, bool]:
    """Re-copy a file from its origin over its raw/ copy. Returns (item, origin_found)."""
    origin = item.origin
    if not origin or not Path(origin).is_file():
        return item, False
    storage = rt.storage(base.id)
    # Read the origin outside the lock into a temp file beside the base, then swap it in.
    storage.kb_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=storage.kb_dir, delete=False) as tmp:
        tmp.write(Path(origin).read_bytes())
        tmp_path = Path(tmp.name)
    try:
        with rt.lock(base.id), rt.catalog.write_tx() as conn:
            current = item_repo.find(conn, item.id)
            if current is None or current.status == "deleting" or not current.relative_path:
                return item, True
            storage.copy_in(tmp_path, current.relative_path, overwrite=True)
            return current, True
    finally:
        tmp_path.unlink(missing_ok=True)


def mark_origin_missing(rt: Runtime, item_id: str, missing: bool) -> None:
    """Record (or clear) the per-item ``origin_missing`` warning a reindex reports."""
    with rt.catalog.write_tx() as conn:
        item_repo.update_data(conn, item_id, warning="origin_missing" if missing else None)
