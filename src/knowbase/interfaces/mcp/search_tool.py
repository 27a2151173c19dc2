"""Registers ``kb_search`` (its body is :func:`.tools.kb_search`; its arguments are declared in
:mod:`.params`)."""

# No `from __future__ import annotations`: the SDK evaluates tool annotations.
from collections.abc import Callable
from typing import Any

from knowbase.interfaces.mcp import budget, tools
from knowbase.interfaces.mcp.params import (
    AlsoQueries,
    BaseIds,
    Group,
    Query,
    SearchMaxChars,
    Since,
    Surroundings,
    Tags,
    TopK,
    Types,
    Under,
    Where,
)
from knowbase.interfaces.mcp.read_tools import READ_ONLY
from knowbase.interfaces.mcp.scope import Scope
from knowbase.interfaces.mcp.tools import _Cites


def register(server: Any, scope_of: Callable[[Any], Scope], cites: _Cites) -> None:
    """Add ``kb_search`` to ``server``, answering within ``scope_of(ctx)``."""
    from mcp.server.mcpserver import Context
    from mcp.types import CallToolResult, ToolAnnotations

    @server.tool(
        name="kb_search",
        title="Search knowledge bases",
        description=(
            "Search one or more knowledge bases (hybrid keyword + vector search). Returns passages "
            "with a cite id, baseId, conceptId, title, locator (page, sheet, heading path), a "
            "score in [0, 1] and its scoreKind, best first, plus notices on how the search ran. "
            "Filter by folder (under), type, date, tags and metadata (where); topK passages at "
            "most, the reply within maxChars (default 8000; each hit first, then its context). "
            "Cite passages by their id; read around a passage with kb_read."
        ),
        annotations=ToolAnnotations(**READ_ONLY),
    )
    def kb_search(
        ctx: Context,
        query: Query,
        baseIds: BaseIds,
        under: Under = None,
        types: Types = None,
        since: Since = None,
        context: Surroundings = None,
        tags: Tags = None,
        where: Where = None,
        topK: TopK = None,
        maxChars: SearchMaxChars = budget.DEFAULT_MAX_CHARS,
        alsoQueries: AlsoQueries = None,
        group: Group = None,
    ) -> CallToolResult:
        return tools.kb_search(
            scope_of(ctx), cites, query=query, base_ids=baseIds, under=under, types=types,
            since=since, context=context, tags=tags, where=where, top_k=topK,
            max_chars=maxChars, also=alsoQueries, group=group,
        )  # fmt: skip
