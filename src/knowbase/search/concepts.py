"""Concept IDs: resolve, read, grep, organisation tree, delete / refresh by Concept ID (§8).

A Concept ID is a leaf's exact material path inside the base's raw/ tree (``notes/a.md``), never
normalised. It resolves only when the path exists in *this* base's index and its item is
visible: same base, ``completed``. So no other base's content, no deleted or unfinished item's,
and nothing outside raw/ (``../x``, ``.kb/index.sqlite``, ``/etc/passwd``) can be read.

    concepts = kb.concepts
    page = concepts.read_concept("docs", "guide.md", char_start=0, char_end=5000)
    hits = concepts.grep_concept("docs", "guide.md", r"install\\w*")

The grep scan itself is ``search/grep.py``; the tree is walked lazily, a page per level.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sqlalchemy.engine import Connection

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.guards import assert_base_runnable
from knowbase.catalog.models import Base, Item
from knowbase.errors import InvalidInput, NotFound
from knowbase.runtime import Runtime
from knowbase.search import sections
from knowbase.search.grep import compile_pattern, grep_text

__all__ = [
    "ConceptService",
    "build_tree",
    "catalog_tree",
    "compile_pattern",
    "grep_text",
    "slice_bounds",
    "walk_tree",
]

READ_MAX_CHARS = 20_000
TREE_MAX_NODES = 1_000
TREE_PAGE = 100  # rows per level read; at most one page per open level is read ahead
CONCEPT_ID_MAX_CHARS = 1_000


class ConceptService:
    """Concept ID operations over one runtime (the facade's ``kb.concepts``). The batch writes
    call the workflows they are given (``delete(base_id, item_ids)``, ``reindex(...)``), never
    the facade: the facade passes its operations in."""

    def __init__(
        self,
        rt: Runtime,
        *,
        delete: Callable[[str, list[str]], str | None],
        reindex: Callable[[str, list[str]], str | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rt, self._delete, self._reindex = rt, delete, reindex
        self._clock = clock

    def _base(self, name_or_id: str) -> Base:
        with self.rt.catalog.read() as conn:
            return base_repo.resolve(conn, name_or_id)

    # --- resolution ----------------------------------------------------------------------------
    def resolve(self, base: str, concept_id: str) -> Item:
        """The visible item whose material path is exactly ``concept_id``.

        Raises ``NotFound`` (details ``kind="concept"``) for anything else, including paths that
        try to leave the material root, and ``BaseFailed`` on a failed base.
        """
        b = self._base(base)
        assert_base_runnable(b, "reading concepts")
        return self._resolve_in(b, concept_id)

    def _resolve_in(self, b: Base, concept_id: str) -> Item:
        if not _plausible(concept_id):
            raise _not_found(b, concept_id)
        material_id = self.rt.store(b).material_by_path(concept_id)
        if material_id is None:
            raise _not_found(b, concept_id)
        with self.rt.catalog.read() as conn:
            item = item_repo.find(conn, material_id)
        if (
            item is None
            or item.base_id != b.id
            or item.status != "completed"
            or item.is_container
            or item.concept_id != concept_id
        ):
            raise _not_found(b, concept_id)
        return item

    def _content(self, b: Base, item: Item, concept_id: str) -> str:
        text = self.rt.store(b).content_text(item.id)
        if text is None:
            raise NotFound(
                f"Knowledge concept content for {concept_id!r} is not available yet",
                hint="retry in a moment; the document is being rebuilt",
                kind="concept_content",
                retryable=True,
                base_id=b.id,
                concept_id=concept_id,
            )
        return text

    # --- read ----------------------------------------------------------------------------------
    def read_concept(
        self,
        base: str,
        concept_id: str,
        *,
        char_start: int | None = None,
        char_end: int | None = None,
    ) -> dict[str, Any]:
        """A slice of the document's text (at most 20,000 chars) with the locators it spans.

        ``start = clamp(char_start or 0, 0, total)``; ``natural_end = min(char_end or total,
        total)``; ``end = max(start, min(natural_end, start + 20000))``; ``truncated`` when
        ``end < natural_end``. ``locators`` lists the units overlapping ``[start, end)``.
        """
        b, item, text = self._open(base, concept_id)
        start, end, truncated = slice_bounds(len(text), char_start, char_end)
        return self._page(b, item, concept_id, text, start, end, truncated)

    def _open(self, base: str, concept_id: str) -> tuple[Base, Item, str]:
        b = self._base(base)
        assert_base_runnable(b, "reading concepts")
        item = self._resolve_in(b, concept_id)
        return b, item, self._content(b, item, concept_id)

    def _page(
        self, b: Base, item: Item, concept_id: str, text: str, start: int, end: int, more: bool
    ) -> dict[str, Any]:
        units = self.rt.store(b).list_units(item.id)
        locators = [
            {
                "unit_index": u.unit_index,
                "char_start": u.char_start,
                "char_end": u.char_end,
                "locator": u.locator,
            }
            for u in units
            if _overlaps(u.char_start, u.char_end, start, end)
        ]
        return {
            **_head(b, item, concept_id),
            "total_chars": len(text),
            "char_start": start,
            "char_end": end,
            "content": text[start:end],
            "truncated": more,
            "locators": locators,
        }

    # --- outline and sections (search/sections.py) ----------------------------------------------
    def outline(
        self, base: str, concept_id: str, *, depth: int | None = None, under: str | None = None
    ) -> dict[str, Any]:
        """The document's outline: headings, slides, sheets, chapters, pages or token windows,
        each node with its id, locator, char range, tokens, tables and figures. ``depth``
        levels at most (1: the top level); ``under`` a node id or heading path: its subtree."""
        b, item, text = self._open(base, concept_id)
        units = self.rt.store(b).list_units(item.id)
        body = sections.outline_body(text, units, depth=depth, under=under)
        return {**_head(b, item, concept_id), "total_chars": len(text), **body}

    def read_section(
        self,
        base: str,
        concept_id: str,
        section: str | None = None,
        *,
        cursor: str | None = None,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        """One section whole (a node id or heading path), within ``max_tokens`` (default
        1,500); ``truncated`` with ``next_cursor`` when the section goes on. The shape of
        :meth:`read_concept` plus ``section`` and ``next_cursor``."""
        b, item, text = self._open(base, concept_id)
        units = self.rt.store(b).list_units(item.id)
        node, start, end = sections.section_bounds(
            text, units, section=section, cursor=cursor, max_tokens=max_tokens
        )
        page = self._page(b, item, concept_id, text, start, end, end < node.char_end)
        return {**page, **sections.section_info(node, end)}

    # --- grep ----------------------------------------------------------------------------------
    def grep_concept(
        self,
        base: str,
        concept_id: str,
        pattern: str,
        *,
        ignore_case: bool = True,
        max_matches: int | None = None,
    ) -> dict[str, Any]:
        """Line-wise regex matches with document offsets and bounded snippets.

        Lines are split on ``\\n`` and searched whole, so a match never spans lines and
        ``^``/``$`` are per line. ``max_matches`` is clamped to 1..200 (default 50). A pattern
        that does not compile raises ``InvalidPattern``. A scan stopped by the time budget or
        the input-length bound returns what it found with ``partial: true``, ``stopped`` and a
        ``reason`` (a catastrophic pattern: no matches, partial, in about the budget's time).
        """
        compiled = compile_pattern(pattern, ignore_case=ignore_case)
        b, item, text = self._open(base, concept_id)
        found = grep_text(text, compiled, max_matches=max_matches, clock=self._clock)
        return {**_head(b, item, concept_id), **found}

    # --- tree ----------------------------------------------------------------------------------
    def organization_tree(self, base: str, *, max_depth: int | None = None) -> dict[str, Any]:
        """Pre-order DFS over the base's non-deleting items, ordered by (created_at, id).

        Any base status. Nodes are ``{depth, item_id, title, item_type, status, concept_id?}``;
        ``concept_id`` only on completed leaves; ``max_depth`` drops deeper levels; at most
        1,000 nodes (``truncated``); ``total_items`` counts every non-deleting item.
        Reads what it shows: each level a page at a time by the ``(base_id, group_id,
        created_at)`` index, stopping at the node cap, and ``total_items`` is a SQL count.
        """
        if max_depth is not None and max_depth < 0:
            raise InvalidInput("max_depth must be ≥ 0", max_depth=max_depth)
        b = self._base(base)
        with self.rt.catalog.read() as conn:
            nodes, truncated, total = catalog_tree(conn, b.id, max_depth=max_depth)
        if not truncated and max_depth is None:
            count_failed_files(nodes)
        return {"base_id": b.id, "nodes": nodes, "truncated": truncated, "total_items": total}

    # --- batch writes --------------------------------------------------------------------------
    def delete_concepts(self, base: str, concept_ids: Iterable[str]) -> dict[str, Any]:
        """Delete the visible concepts in ONE ``delete_items`` call; the rest are not found."""
        b, found, not_found = self._split(base, concept_ids, "deleting concepts")
        job_id = self._delete(b.id, list(found.values())) if found else None
        return {"applied": list(found), "not_found": not_found, "job_id": job_id}

    def refresh_concepts(self, base: str, concept_ids: Iterable[str]) -> dict[str, Any]:
        """Reindex the visible concepts in ONE ``reindex_items`` call (guards see the batch)."""
        b, found, not_found = self._split(base, concept_ids, "refreshing concepts")
        job_id = self._reindex(b.id, list(found.values())) if found else None
        return {"applied": list(found), "not_found": not_found, "job_id": job_id}

    def _split(
        self, base: str, concept_ids: Iterable[str], operation: str
    ) -> tuple[Base, dict[str, str], list[str]]:
        b = self._base(base)
        assert_base_runnable(b, operation)
        found: dict[str, str] = {}
        not_found: list[str] = []
        for concept_id in dict.fromkeys(concept_ids):
            try:
                found[concept_id] = self._resolve_in(b, concept_id).id
            except NotFound:
                not_found.append(concept_id)
        return b, found, not_found


# --- pure helpers ------------------------------------------------------------------------------
def slice_bounds(total: int, char_start: int | None, char_end: int | None) -> tuple[int, int, bool]:
    """§8's slice maths: ``(start, end, truncated)``."""
    start = min(max(char_start if char_start is not None else 0, 0), total)
    natural_end = min(char_end if char_end is not None else total, total)
    end = max(start, min(natural_end, start + READ_MAX_CHARS))
    return start, end, end < natural_end


def _overlaps(u_start: int, u_end: int, start: int, end: int) -> bool:
    if start == end:  # an empty slice still says where it is
        return u_start <= start < u_end
    return u_start < end and u_end > start


def catalog_tree(
    conn: Connection, base_id: str, *, max_depth: int | None = None
) -> tuple[list[dict[str, Any]], bool, int]:
    """``(nodes, truncated, total_items)`` of a base, read a page per level over ``conn``."""
    page = min(TREE_PAGE, TREE_MAX_NODES + 1)

    def children(parent: Item | None) -> Iterator[Item]:
        pid = parent.id if parent is not None else None

        def fetch(after: tuple[int, str] | None) -> list[Item]:
            return item_repo.tree_page(conn, base_id, pid, after=after, limit=page)

        level = _paged(fetch, page)
        if parent is None:  # items whose container is being deleted show as roots
            orphans = item_repo.orphans_of_deleting(conn, base_id, limit=TREE_MAX_NODES + 1)
            level = heapq.merge(level, orphans, key=_tree_order)
        return level

    nodes, truncated = walk_tree(children, max_depth=max_depth, max_nodes=TREE_MAX_NODES)
    return nodes, truncated, item_repo.count_visible(conn, base_id)


def build_tree(
    items: list[Item], *, max_depth: int | None = None, max_nodes: int = TREE_MAX_NODES
) -> tuple[list[dict[str, Any]], bool]:
    """Pre-order DFS flat list of ``items`` (already ordered by created_at, id)."""
    ids = {i.id for i in items}
    kids: dict[str | None, list[Item]] = {}
    for item in items:
        parent = item.group_id if item.group_id in ids else None
        kids.setdefault(parent, []).append(item)
    return walk_tree(
        lambda p: iter(kids.get(p.id if p is not None else None, [])),
        max_depth=max_depth,
        max_nodes=max_nodes,
    )


def walk_tree(
    children: Callable[[Item | None], Iterator[Item]],
    *,
    max_depth: int | None = None,
    max_nodes: int = TREE_MAX_NODES,
) -> tuple[list[dict[str, Any]], bool]:
    """Pre-order DFS: ``children(None)`` are the roots. Returns ``(nodes, truncated)``.

    Pulls lazily: a level is asked for only when its parent is shown and within
    ``max_depth``, and nothing after the node that would exceed ``max_nodes``.
    Only containers are asked for children (every other type is a leaf).
    """
    nodes: list[dict[str, Any]] = []
    stack: list[tuple[Iterator[Item], int]] = [(children(None), 0)]
    while stack:
        level, depth = stack[-1]
        item = next(level, None)
        if item is None:
            stack.pop()
            continue
        if len(nodes) >= max_nodes:
            return nodes, True
        node: dict[str, Any] = {
            "depth": depth,
            "item_id": item.id,
            "title": item.title,
            "item_type": item.type,
            "status": item.status,
        }
        if item.status == "completed" and not item.is_container and item.concept_id:
            node["concept_id"] = item.concept_id
        nodes.append(node)
        if item.is_container and (max_depth is None or depth < max_depth):
            stack.append((children(item), depth + 1))
    return nodes, False


def count_failed_files(nodes: list[dict[str, Any]]) -> None:
    """On each folder node some of whose files failed: ``files`` and ``failed_files`` under
    it (the folder's own status says ``failed`` for them; a person counts files). Needs the
    whole tree: the nodes are in pre-order, so a folder's files follow it, deeper."""
    open_folders: list[dict[str, Any]] = []
    for node in nodes:
        while open_folders and open_folders[-1]["depth"] >= node["depth"]:
            open_folders.pop()
        if node["item_type"] in ("directory", "sitemap"):
            node.update(files=0, failed_files=0)
            open_folders.append(node)
        else:
            for folder in open_folders:
                folder["files"] += 1
                folder["failed_files"] += node["status"] == "failed"
    for node in nodes:
        if node["item_type"] in ("directory", "sitemap") and not node["failed_files"]:
            del node["files"], node["failed_files"]


def _paged(fetch: Callable[[tuple[int, str] | None], list[Item]], page: int) -> Iterator[Item]:
    """Items from ``fetch(after_cursor)`` pages of ``page`` rows, the next asked for on demand."""
    after: tuple[int, str] | None = None
    while True:
        rows = fetch(after)
        yield from rows
        if len(rows) < page:
            return
        after = _tree_order(rows[-1])


def _tree_order(item: Item) -> tuple[int, str]:
    return (item.created_at, item.id)


def _head(b: Base, item: Item, concept_id: str) -> dict[str, Any]:
    return {
        "base_id": b.id,
        "concept_id": concept_id,
        "item_id": item.id,
        "title": item.title,
        "item_type": item.type,
    }


def _plausible(concept_id: object) -> bool:
    """Cheap refusals before any lookup; the exact-path lookup is what decides."""
    if not isinstance(concept_id, str) or not concept_id or len(concept_id) > CONCEPT_ID_MAX_CHARS:
        return False
    if "\x00" in concept_id or concept_id.startswith(("/", "\\")) or concept_id[1:3] == ":\\":
        return False
    parts = concept_id.replace("\\", "/").split("/")
    return ".." not in parts and parts[0] != ".kb"


def _not_found(b: Base, concept_id: object) -> NotFound:
    return NotFound(
        f"Knowledge concept {concept_id!r} not found in base {b.name!r}",
        hint="check the Concept ID against the base's tree (kb tree / kb_list outline)",
        kind="concept",
        base_id=b.id,
        concept_id=concept_id,
    )
