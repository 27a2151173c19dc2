"""Registers ``kb_outline`` on the server (its body is :func:`.outline.kb_outline`).

Why a tool of its own rather than ``kb_read`` with ``outline: true``: both were tried with the
SDK's client (docs/mcp.md, "Outlines and sections"). As a flag it made ``kb_read`` a four-mode
tool whose ``outline`` quietly outranked ``pattern`` and ``charStart``; as a tool it is named in
``tools/list`` for what it answers and has only the arguments an outline uses.
"""

# No `from __future__ import annotations`: the SDK evaluates tool annotations.
from collections.abc import Callable
from typing import Any

from knowbase.interfaces.mcp import budget
from knowbase.interfaces.mcp import outline as mcp_outline
from knowbase.interfaces.mcp.params import BaseId, ConceptId, Depth, OutlineMaxChars, Section
from knowbase.interfaces.mcp.read_tools import READ_ONLY
from knowbase.interfaces.mcp.scope import Scope


def register(server: Any, scope_of: Callable[[Any], Scope]) -> None:
    """Add ``kb_outline`` to ``server``, answering within ``scope_of(ctx)``: the server's
    scope as the calling key sees it."""
    from mcp.server.mcpserver import Context
    from mcp.types import CallToolResult, ToolAnnotations

    @server.tool(
        name="kb_outline",
        title="Sections of a document",
        description=(
            "The outline of one document, by conceptId: its sections (headings; slides, sheets "
            "or pages where it has no headings) depth-first, each with an id, title, locator, "
            "character range, token count and the tables and figures under it. Read a section "
            "whole with kb_read (section=<id>). depth limits the levels (1: the top level); "
            "under=<id> shows one section's subsections."
        ),
        annotations=ToolAnnotations(**READ_ONLY),
    )
    def kb_outline(
        ctx: Context,
        baseId: BaseId,
        conceptId: ConceptId,
        depth: Depth = None,
        under: Section = None,
        maxChars: OutlineMaxChars = budget.DEFAULT_MAX_CHARS,
    ) -> CallToolResult:
        return mcp_outline.kb_outline(
            scope_of(ctx),
            base_id=baseId,
            concept_id=conceptId,
            depth=depth,
            under=under,
            max_chars=maxChars,
        )
