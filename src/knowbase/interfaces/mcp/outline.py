"""``kb_outline`` (a document's sections) and ``kb_read``'s section reads, for agents.

The outline answers "what is in this document"; ``kb_read`` with ``section`` (a node id such
as ``"3"`` or a heading path such as ``"Results > Method"``) then reads one section whole,
``maxTokens`` at a time, continuing with ``cursor``. An outline is kept within ``maxChars``
(default 8,000) by showing fewer levels first, then fewer nodes, and says so.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import Field

from knowbase.errors import KnowbaseError, NotFound
from knowbase.interfaces.mcp import budget
from knowbase.interfaces.mcp.results import _camel, _fail, _from_error, _ok

if TYPE_CHECKING:
    from knowbase.interfaces.mcp.scope import Scope
    from knowbase.interfaces.mcp.tools import _Cites


SECTION = Field(
    min_length=1,
    max_length=1000,
    description='Read one section whole: a kb_outline id ("3", "2.1") or a heading path '
    '("Results > Method")',
)
CURSOR = Field(min_length=1, max_length=1100, description="nextCursor of a section read")
MAX_TOKENS = Field(ge=100, le=5000, description="Section read budget in tokens (default 1500)")


def _guidance(exc: NotFound) -> str | None:
    if exc.details.get("kind") == "section":
        return "Call kb_outline for this document's section ids, then kb_read with section."
    from knowbase.interfaces.mcp.tools import _not_found_guidance

    return _not_found_guidance(exc)


def kb_outline(
    scope: Scope,
    *,
    base_id: str,
    concept_id: str,
    depth: int | None,
    under: str | None,
    max_chars: int = budget.DEFAULT_MAX_CHARS,
) -> Any:
    """The document's outline within ``max_chars``: ``depth`` levels at most, fewer when the
    reply would not fit (:func:`_fit_nodes`; a notice says how many nodes were left out)."""
    from knowbase.interfaces.mcp.scope import OutOfScope

    try:
        b = scope.base(base_id)
        data = _camel(scope.kb.concepts.outline(b.id, concept_id, depth=depth, under=under))
    except OutOfScope as exc:
        return _fail(str(exc))
    except NotFound as exc:
        return _from_error(exc, _guidance(exc))
    except KnowbaseError as exc:
        return _from_error(exc)
    for key in ("itemId", "truncated"):
        data.pop(key, None)
    data["type"] = data.pop("itemType")
    data["nodes"] = _fit_nodes(data, max_chars - budget.FRAME_CHARS)
    left_out = data["totalNodes"] - len(data["nodes"])
    if left_out:
        data["notices"] = [
            f"{left_out} of {data['totalNodes']} sections are not shown (depth, or to fit "
            f"maxChars={max_chars}); kb_outline with under=<node id> lists one part's "
            "sections."
        ]
    data["next"] = "kb_read with conceptId and section=<node id> reads a section whole."
    return _ok(data)


def read_section(
    scope: Scope,
    cites: _Cites,
    base_id: str,
    concept_id: str,
    section: str | None,
    cursor: str | None,
    max_tokens: int | None,
    slice_args: tuple[int | None, int | None, str | None] = (None, None, None),
) -> Any:
    """One section of a document, ``max_tokens`` at a time, with a cite id. ``slice_args``
    (``charStart``, ``charEnd``, ``pattern``) given with it are refused, not quietly dropped."""
    from knowbase.interfaces.mcp.scope import OutOfScope

    names = ("charStart", "charEnd", "pattern")
    mixed = [name for name, value in zip(names, slice_args, strict=True) if value is not None]
    if mixed:
        return _fail(
            f"section/cursor read a whole section; {', '.join(mixed)} belong to a slice or a "
            "grep. Call kb_read with one or the other.",
            code="invalid_input",
        )
    try:
        b = scope.base(base_id)
        page = scope.kb.concepts.read_section(
            b.id, concept_id, section, cursor=cursor, max_tokens=max_tokens
        )
    except OutOfScope as exc:
        return _fail(str(exc))
    except NotFound as exc:
        return _from_error(exc, _guidance(exc))
    except KnowbaseError as exc:
        return _from_error(exc)
    data = _camel(page)
    data["type"] = data.pop("itemType")
    data.pop("locators", None)  # the section's locator says where it is
    if data.get("nextCursor"):
        data["next"] = "The section goes on: kb_read with cursor=nextCursor reads the rest."
    return _ok({"id": cites.next(), **data})


def _fit_nodes(data: dict[str, Any], room: int) -> list[dict[str, Any]]:
    """The nodes that fit ``room``: every node of the most levels that fit whole, then the
    first nodes of the next level (in document order) that still fit, so a book of 300
    chapters shows its parts and its first chapters rather than its title alone."""
    nodes = data["nodes"]

    def shown(levels: int, extra: int) -> list[dict[str, Any]]:
        out, seen = [], 0
        for n in nodes:
            if n["depth"] < levels:
                out.append(n)
            elif n["depth"] == levels and seen < extra:
                out.append(n)
                seen += 1
        return out

    def fits(part: list[dict[str, Any]]) -> bool:
        return _size({**data, "nodes": part}) <= room

    if fits(nodes):
        return nodes
    levels = max(n["depth"] for n in nodes)
    while levels > 0 and not fits(shown(levels, 0)):
        levels -= 1
    lo, hi = 0, sum(n["depth"] == levels for n in nodes)
    while lo < hi:  # the most nodes of the next level that still fit
        mid = (lo + hi + 1) // 2
        if fits(shown(levels, mid)):
            lo = mid
        else:
            hi = mid - 1
    return shown(levels, lo) or nodes[:1]


def _size(data: dict[str, Any]) -> int:
    return len(json.dumps(data, ensure_ascii=False, separators=(",", ":")))
