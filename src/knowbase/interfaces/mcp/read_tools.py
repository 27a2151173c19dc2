"""Registers the reading tools: ``kb_list``, ``kb_tree``, ``kb_grep`` and ``kb_read`` (their
bodies are :mod:`.listing`, :func:`.tools.kb_read` and :func:`.outline.read_section`)."""

# No `from __future__ import annotations`: the SDK evaluates tool annotations.
from collections.abc import Callable
from typing import Any

from knowbase.interfaces.mcp import listing, tools
from knowbase.interfaces.mcp import outline as mcp_outline
from knowbase.interfaces.mcp.params import (
    BaseId,
    CharEnd,
    CharStart,
    ConceptId,
    GrepPattern,
    ListCursor,
    ListLimit,
    ListQuery,
    MaxDepth,
    MaxMatches,
    MaxTokens,
    OutlineBase,
    Pattern,
    ReadCursor,
    ReadSection,
)
from knowbase.interfaces.mcp.scope import Scope
from knowbase.interfaces.mcp.tools import LIST_DEFAULT_LIMIT, _Cites

READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}


def register(server: Any, scope_of: Callable[[Any], Scope], cites: _Cites) -> None:
    """Add the reading tools to ``server``, each answering within ``scope_of(ctx)``: the
    server's scope as the calling key sees it."""
    _register_outlines(server, scope_of)
    _register_reads(server, scope_of, cites)


def _register_outlines(server: Any, scope_of: Callable[[Any], Scope]) -> None:
    """``kb_list`` and ``kb_tree``: the bases, and one base's outline."""
    from mcp.server.mcpserver import Context
    from mcp.types import CallToolResult, ToolAnnotations

    @server.tool(
        name="kb_list",
        title="List knowledge bases / outline one base",
        description=(
            "Without baseId: list the knowledge bases you may use (id, name, item counts, sample "
            "sources, retrieval mode hybrid/bm25/switching, model, capabilities, updatedAt), "
            "filtered by an optional query, paged with limit/cursor. With baseId: that base's "
            "outline (as kb_tree)."
        ),
        annotations=ToolAnnotations(**READ_ONLY),
    )
    def kb_list(
        ctx: Context,
        query: ListQuery = None,
        limit: ListLimit = LIST_DEFAULT_LIMIT,
        cursor: ListCursor = None,
        baseId: OutlineBase = None,
        maxDepth: MaxDepth = None,
    ) -> CallToolResult:
        return listing.kb_list(
            scope_of(ctx),
            query=query,
            limit=limit,
            cursor=cursor,
            base_id=baseId,
            max_depth=maxDepth,
        )

    @server.tool(
        name="kb_tree",
        title="Outline of a knowledge base",
        description=(
            "The outline of one knowledge base: its folders and documents depth-first, each "
            "document with the conceptId to use with kb_read, kb_grep and kb_manage. maxDepth "
            "limits how deep it goes (0: the top level only)."
        ),
        annotations=ToolAnnotations(**READ_ONLY),
    )
    def kb_tree(ctx: Context, baseId: BaseId, maxDepth: MaxDepth = None) -> CallToolResult:
        return listing.kb_tree(scope_of(ctx), base_id=baseId, max_depth=maxDepth)


def _register_reads(server: Any, scope_of: Callable[[Any], Scope], cites: _Cites) -> None:
    """``kb_grep`` and ``kb_read``: inside one document."""
    from mcp.server.mcpserver import Context
    from mcp.types import CallToolResult, ToolAnnotations

    @server.tool(
        name="kb_grep",
        title="Search inside one document",
        description=(
            "A regular-expression search inside one document of a knowledge base, by conceptId: "
            "matching lines with line numbers, character offsets and snippets "
            "(case-insensitive unless ignoreCase=false). Read around a match with kb_read."
        ),
        annotations=ToolAnnotations(**READ_ONLY),
    )
    def kb_grep(
        ctx: Context,
        baseId: BaseId,
        conceptId: ConceptId,
        pattern: Pattern,
        ignoreCase: bool = True,
        maxMatches: MaxMatches = None,
    ) -> CallToolResult:
        return tools.kb_read(
            scope_of(ctx), cites, base_id=baseId, concept_id=conceptId, char_start=None,
            char_end=None, pattern=pattern, ignore_case=ignoreCase, max_matches=maxMatches,
        )  # fmt: skip

    @server.tool(
        name="kb_read",
        title="Read or grep a document",
        description=(
            "Read a document of a knowledge base by its conceptId: a slice of at most 20,000 "
            "characters from charStart to charEnd (truncated=true means there is more; continue "
            "from charEnd). With section (a kb_outline id or heading path): that section whole, "
            "maxTokens at a time (continue with cursor=nextCursor). With pattern: regex search "
            "line by line instead (case-insensitive unless ignoreCase=false), returning line "
            "numbers, offsets and snippets."
        ),
        annotations=ToolAnnotations(**READ_ONLY),
    )
    def kb_read(
        ctx: Context,
        baseId: BaseId,
        conceptId: ConceptId,
        charStart: CharStart = None,
        charEnd: CharEnd = None,
        pattern: GrepPattern = None,
        ignoreCase: bool = True,
        maxMatches: MaxMatches = None,
        section: ReadSection = None,
        cursor: ReadCursor = None,
        maxTokens: MaxTokens = None,
    ) -> CallToolResult:
        scope = scope_of(ctx)  # the calling key's scope, for sections too
        if section is not None or cursor is not None:
            args = (baseId, conceptId, section, cursor, maxTokens, (charStart, charEnd, pattern))
            return mcp_outline.read_section(scope, cites, *args)
        return tools.kb_read(
            scope, cites, base_id=baseId, concept_id=conceptId, char_start=charStart,
            char_end=charEnd, pattern=pattern, ignore_case=ignoreCase, max_matches=maxMatches,
        )  # fmt: skip
