"""Outlines and section reads of one document, on top of :mod:`knowbase.pipeline.outline`.

The outline is computed when asked, from the document's stored Markdown and its units (so
every indexed document has one, on every backend, with no reindex); this module shapes it for
the surfaces and finds the section a caller names:

- by node id: ``"3"``, ``"2.1"`` (as the outline shows them);
- by heading path: ``"Guide > Install"`` (titles joined by ``>``; case and spacing ignored),
  or its last titles (``"Install"``) when only one node ends that way, or the start of its
  last title (``"Turn 4"`` for ``"Turn 4 decisions (…)"``) when nothing else matches.

A section is read whole within a token budget; a longer one continues with ``next_cursor``
(``"<node id>@<char offset>"``), which names its section, so the cursor alone reads on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowbase.errors import InvalidInput, NotFound
from knowbase.pipeline.indexing.tokens import estimate_tokens
from knowbase.pipeline.outline import Located as Located
from knowbase.pipeline.outline import OutlineNode, Part, build_outline, cut_for_tokens, outline_kind

__all__ = [
    "OUTLINE_MAX_NODES",
    "SECTION_DEFAULT_TOKENS",
    "SECTION_MAX_TOKENS",
    "find_section",
    "outline_body",
    "section_bounds",
    "section_info",
]

OUTLINE_MAX_NODES = 500
SECTION_DEFAULT_TOKENS = 1_500  # ~6,000 characters: a reply under 8 KB with its frame
SECTION_MAX_TOKENS = 5_000  # the 20,000 characters a read returns at most


def outline_body(
    text: str,
    units: Sequence[Located],
    *,
    depth: int | None = None,
    under: str | None = None,
    max_nodes: int = OUTLINE_MAX_NODES,
) -> dict[str, Any]:
    """The outline's part of a reply: ``kind``, ``nodes`` (pre-order, ``depth`` levels at
    most, ``under``'s subtree when given), ``total_nodes`` (in the document, or in that
    subtree) and ``truncated`` (nodes left out by the depth or the ``max_nodes`` cap)."""
    if depth is not None and depth < 1:
        raise InvalidInput("depth must be ≥ 1 (1: the top level only)", depth=depth)
    nodes = build_outline(text, units)
    base_depth, tokens = 0, estimate_tokens(text)
    if under is not None:
        top = find_section(nodes, under)
        nodes = [n for n in nodes if n is top or n.id.startswith(top.id + ".")]
        base_depth, tokens = top.depth, top.tokens
    shown = [n for n in nodes if depth is None or n.depth - base_depth < depth]
    capped = shown[:max_nodes]
    return {
        "kind": outline_kind(units, text),
        "total_tokens": tokens,
        "nodes": [_node_dict(n, base_depth) for n in capped],
        "total_nodes": len(nodes),
        "truncated": len(capped) < len(nodes),
    }


def _node_dict(node: OutlineNode, base_depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": node.id,
        "title": node.title,
        "depth": node.depth - base_depth,
        "char_start": node.char_start,
        "char_end": node.char_end,
        "tokens": node.tokens,
        "locator": node.locator,
    }
    if node.tables:
        out["tables"] = [_part(p) for p in node.tables]
    if node.figures:
        out["figures"] = [_part(p) for p in node.figures]
    return out


def _part(part: Part) -> dict[str, Any]:
    return {"label": part.label, "char_start": part.char_start}


def find_section(nodes: Sequence[OutlineNode], ref: str) -> OutlineNode:
    """The node ``ref`` names: its id, its heading path, or the end of one (see the module
    docstring). ``NotFound`` (``kind="section"``) when none does, ``InvalidInput`` when
    several do (the message lists their ids)."""
    ref = ref.strip()
    for node in nodes:
        if node.id == ref:
            return node
    wanted = _path(ref.split(">"))
    if not wanted:
        raise NotFound(f"no section {ref!r}", kind="section", section=ref)
    exact = [n for n in nodes if _path(n.path) == wanted]
    if len(exact) == 1:
        return exact[0]
    ending = exact or [n for n in nodes if _path(n.path)[-len(wanted) :] == wanted]
    if not ending:  # the start of a long title: "Turn 4 decisions" for "Turn 4 decisions (…)"
        ending = [n for n in nodes if _starts(_path(n.path), wanted)]
    if len(ending) == 1:
        return ending[0]
    if ending:
        ids = ", ".join(f"{n.id} ({' > '.join(n.path)})" for n in ending[:10])
        raise InvalidInput(
            f"section {ref!r} names {len(ending)} sections: {ids}; use a node id",
            section=ref,
            candidates=[n.id for n in ending[:10]],
        )
    raise NotFound(
        f"no section {ref!r} in this document",
        hint="see the document's outline for its section ids and titles",
        kind="section",
        section=ref,
    )


def _starts(path: list[str], wanted: list[str]) -> bool:
    """``path`` ends with ``wanted``, its last title only begun."""
    if len(path) < len(wanted):
        return False
    tail = path[len(path) - len(wanted) :]
    return tail[:-1] == wanted[:-1] and tail[-1].startswith(wanted[-1])


def _path(titles: Sequence[str]) -> list[str]:
    return [" ".join(t.split()).casefold() for t in titles if t.strip()]


def section_bounds(
    text: str,
    units: Sequence[Located],
    *,
    section: str | None,
    cursor: str | None,
    max_tokens: int | None,
) -> tuple[OutlineNode, int, int]:
    """``(node, start, end)`` of the next read of a section: from ``cursor`` (which names its
    section) or the section's start, as far as ``max_tokens`` (estimated) goes, cut at a
    paragraph or line break."""
    budget = SECTION_DEFAULT_TOKENS if max_tokens is None else max_tokens
    if not 1 <= budget <= SECTION_MAX_TOKENS:
        raise InvalidInput(f"max_tokens must be 1 to {SECTION_MAX_TOKENS}", max_tokens=max_tokens)
    nodes = build_outline(text, units)
    offset: int | None = None
    if cursor is not None:
        section, offset = _parse_cursor(cursor)
    if section is None:
        raise InvalidInput("name a section (an outline node id or a heading path) or a cursor")
    node = find_section(nodes, section)
    start = node.char_start if offset is None else min(max(offset, node.char_start), node.char_end)
    while start < node.char_end and text[start] in " \t\r\n":
        start += 1
    end = cut_for_tokens(text, start, node.char_end, budget) if start < node.char_end else start
    return node, start, end


def section_info(node: OutlineNode, end: int) -> dict[str, Any]:
    """What a section read says about its section, and the cursor that reads on."""
    return {
        "section": {
            "id": node.id,
            "title": node.title,
            "path": node.path,
            "char_start": node.char_start,
            "char_end": node.char_end,
            "tokens": node.tokens,
            "locator": node.locator,
        },
        "next_cursor": f"{node.id}@{end}" if end < node.char_end else None,
    }


def _parse_cursor(cursor: str) -> tuple[str, int]:
    node_id, _, offset = cursor.rpartition("@")
    if not node_id or not offset.isdigit():
        raise InvalidInput(
            f"cursor {cursor!r} is not one a section read returned (next_cursor)", cursor=cursor
        )
    return node_id, int(offset)
