"""``kb_list`` and ``kb_tree``: the bases an assistant may use, with their retrieval mode and
freshness, and one base's outline (folders and documents with their Concept IDs)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from knowbase import Base, Item
from knowbase.errors import KnowbaseError, NotFound
from knowbase.interfaces.mcp.results import _camel, _fail, _from_error, _ok
from knowbase.interfaces.mcp.scope import OutOfScope
from knowbase.interfaces.mcp.tools import SAMPLE_SOURCES, _not_found_guidance

if TYPE_CHECKING:
    from knowbase.interfaces.mcp.scope import Scope
    from knowbase.service import Knowledge


#: Item statuses that mean "not indexed yet": queued, or on its way through the pipeline (the
#: catalog's ``ACTIVE_STATUSES`` and ``idle``; surfaces do not import the catalog's schema).
IN_FLIGHT = ("idle", "preparing", "processing", "reading", "embedding")


# --- listing helpers ---------------------------------------------------------------------------
def _sample(item: Item) -> str:
    if item.type in ("url", "sitemap"):
        return str(item.data.get("url") or item.source)
    if item.type == "note":
        first = next(
            (ln.strip() for ln in str(item.data.get("content") or "").splitlines() if ln.strip()),
            item.source,
        )
        return first if len(first) <= 79 else first[:79] + "…"
    return item.source or str(item.relative_path or "")


def _haystack(item: Item) -> list[str]:
    d = item.data
    return [str(v) for v in (d.get("source"), d.get("url"), d.get("relative_path"),
                             d.get("content")) if v]  # fmt: skip


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode()


def _decode_cursor(cursor: str) -> int | None:
    try:
        kind, _, num = base64.urlsafe_b64decode(cursor.encode()).decode().partition(":")
        return int(num) if kind == "o" and int(num) >= 0 else None
    except (ValueError, UnicodeError):
        return None


# --- kb_list -----------------------------------------------------------------------------------
def _list_bases(scope: Scope, query: str | None, limit: int, cursor: str | None) -> Any:
    kb = scope.kb
    bases = scope.bases()
    if not bases:
        return _ok(
            {"items": [], "total": 0},
            "No knowledge base is configured for this assistant. Ask the user to create "
            "one (kb base create) or to start the server with access to one.",
        )
    rows = []
    needle = query.casefold() if query else None
    for b in bases:
        try:
            roots = [] if b.status == "failed" else kb.list_items(b.id, roots_only=True)
        except NotFound:
            continue  # deleted (by another process) since the list was read: not listed
        done = [r for r in roots if r.status == "completed"]
        name_hit = not needle or needle in b.name.casefold()
        if not name_hit and (
            b.status != "completed"
            or not any(needle in h.casefold() for r in done for h in _haystack(r))
        ):
            continue
        row: dict[str, Any] = {"id": b.id, "name": b.name, "status": b.status}
        if b.status == "failed":
            row.update(itemCount=0, itemsUnavailable=True)
        else:
            try:
                row.update(capabilities(kb, b, roots))
            except NotFound:
                continue  # deleted meanwhile, as above
            counts = row.get("itemCounts", {})
            # every file, page, note and folder, not the roots only: a folder of 139 files
            # is not "2 items"
            row["itemCount"] = sum(n for s, n in counts.items() if s != "deleting")
            in_flight = sum(counts.get(s, 0) for s in IN_FLIGHT)
            if in_flight:  # the base is still being built: searches miss what is not done
                row.update(status="indexing", itemsIndexing=in_flight)
        row["sampleSources"] = [_sample(r) for r in done[:SAMPLE_SOURCES]]
        rows.append(row)
    offset = 0
    if cursor is not None:
        decoded = _decode_cursor(cursor)
        if decoded is None or (decoded >= len(rows) and rows):
            return _ok(
                {"items": [], "total": len(rows)},
                "This cursor is stale or invalid. Call kb_list again without a cursor.",
            )
        offset = decoded
    if not rows:
        return _ok(
            {"items": [], "total": 0},
            f"No knowledge base matches {query!r}. Call kb_list without a query to see all "
            "bases, or use kb_search to search inside them.",
        )
    page = rows[offset : offset + limit]
    data: dict[str, Any] = {"items": page, "total": len(rows)}
    if offset + limit < len(rows):
        data["nextCursor"] = _encode_cursor(offset + limit)
    return _ok(data)


def capabilities(kb: Knowledge, b: Base, roots: list[Item]) -> dict[str, Any]:
    """How a base answers: its retrieval ``mode`` (``hybrid``, ``bm25`` or ``switching`` while
    a model switch builds the new vectors), ``model``, what it can do, its items by status and
    ``updatedAt`` (the newest change to an item: how fresh the base is)."""
    switch = kb.model_switch(b.id) or {}
    switching = switch.get("status") in ("pending", "running")
    mode = "switching" if switching else ("hybrid" if b.embedding_model_id else "bm25")
    can = ["keyword", "tree", "outline", "read", "grep"]
    if b.embedding_model_id:
        can.insert(1, "vector")
    if b.rerank_model_id:
        can.append("rerank")
    if b.file_processor_id:
        can.append("ocr")
    out: dict[str, Any] = {
        "mode": mode,
        "model": b.embedding_model_id,
        "capabilities": can,
        "itemCounts": kb.counts(b.id),
    }
    if switching:
        out["switchingTo"] = switch.get("to_model")
    newest = max((r.updated_at for r in roots), default=None)
    if newest is not None:
        out["updatedAt"] = datetime.fromtimestamp(newest / 1000, UTC).isoformat(timespec="seconds")
    return {k: v for k, v in out.items() if v not in (None, {}, [])}


def kb_tree(scope: Scope, *, base_id: str, max_depth: int | None) -> Any:
    """One base's outline (``kb_list`` with ``baseId`` gives the same)."""
    return kb_list(scope, query=None, limit=1, cursor=None, base_id=base_id, max_depth=max_depth)


def kb_list(
    scope: Scope,
    *,
    query: str | None,
    limit: int,
    cursor: str | None,
    base_id: str | None,
    max_depth: int | None,
) -> Any:
    """The bases in scope (filtered, paged), or with ``base_id`` that base's outline."""
    try:
        if base_id is None:
            return _list_bases(scope, query, limit, cursor)
        b = scope.base(base_id)
        tree = _camel(scope.kb.concepts.organization_tree(b.id, max_depth=max_depth))
        if not tree["nodes"]:
            return _ok(
                tree,
                f"Knowledge base {b.name!r} is empty. Items can be added with kb_manage "
                "(action add), with the user's approval.",
            )
        return _ok(tree)
    except OutOfScope as exc:
        return _fail(str(exc))
    except NotFound as exc:
        return _from_error(exc, _not_found_guidance(exc))
    except KnowbaseError as exc:
        return _from_error(exc)
