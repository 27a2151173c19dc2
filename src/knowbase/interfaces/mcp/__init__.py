"""The MCP server: seven agent tools over the ``Knowledge`` facade (§8), stdio or streamable HTTP.

Tools (arguments keep the origin's camelCase): ``kb_list`` (bases with their mode, model and
freshness, or one base's outline), ``kb_tree`` (the outline), ``kb_search`` (several bases,
merged), ``kb_outline`` (one document's sections), ``kb_read`` (a slice, one section with
``section``, or grep with ``pattern``), ``kb_grep`` (a regex inside one document) and
``kb_manage`` (add a file / URL / note, delete or refresh by Concept ID, sync).
This module registers them (argument schemas, approval); their bodies and result shapes live in
:mod:`.tools`, :mod:`.manage` and :mod:`.listing`, argument errors in :mod:`.arguments`, the
reply budget in :mod:`.budget`, outlines and sections in :mod:`.outline` (``kb_outline`` is
registered by :mod:`.outline_tool`), the scope in :mod:`.scope`, running the server in
:mod:`.run`.

Scope: the server sees the bases it was started with (``base_ids``), or every base when that is
None; an empty list sees none and every tool fails closed. A base outside the scope answers
``Knowledge base "<id>" is not available to this assistant.`` Over HTTP, each call sees that
scope narrowed to its key's bases, and ``kb_manage`` needs a write key (:mod:`.keys`).

Approval: every ``kb_manage`` call asks the user through MCP form elicitation when the client
declares it; a client without elicitation is refused unless the server runs with
``allow_writes``. The question rides whichever transport the negotiated protocol uses (a
mid-call request before 2026-07-28, ``InputRequiredResult`` after): the SDK's ``Resolve``
machinery picks it.

    kb mcp --home ~/kb --base docs            # stdio (interfaces/mcp/run.py)
    kb mcp --http --port 8765 --allow-writes  # streamable HTTP
"""

# No `from __future__ import annotations`: the SDK evaluates tool annotations, and
# `Resolve(approval)` names a closure that string annotations could not see.
import logging
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from knowbase.interfaces.mcp import (
    arguments,
    budget,
    listing,
    manage_tool,
    outline_tool,
    tools,
)
from knowbase.interfaces.mcp import outline as mcp_outline
from knowbase.interfaces.mcp.keys import principal_of
from knowbase.interfaces.mcp.listing import _decode_cursor as _decode_cursor  # re-exported
from knowbase.interfaces.mcp.scope import Scope as Scope  # re-exported (tests)
from knowbase.interfaces.mcp.scope import resolve_scope as resolve_scope  # re-exported
from knowbase.interfaces.mcp.tools import (
    LIST_DEFAULT_LIMIT,
    LIST_MAX_LIMIT,
    QUERY_MAX_CHARS,
    QUERY_MIN_CHARS,
    SEARCH_MAX_BASES,
    _Cites,
)
from knowbase.interfaces.mcp.tools import _camel as _camel  # re-exported (tests)
from knowbase.service import Knowledge

log = logging.getLogger(__name__)

SERVER_NAME = "knowbase"
DEFAULT_HTTP_PORT = 8765

INSTRUCTIONS = (
    "Knowledge bases of the user. Start with kb_list to see the bases, kb_list with baseId for "
    "one base's outline (Concept IDs), kb_search to find passages (cite the returned ids), "
    "kb_outline for a document's sections, kb_read to read a document or one section of it "
    "(section=<id>) or grep it by Concept ID. kb_manage changes a base and needs "
    "the user's approval."
)


# --- the server --------------------------------------------------------------------------------
def build_server(
    kb: Knowledge,
    *,
    base_ids: list[str] | None,
    allow_writes: bool,
    path_roots: list[Path] | None = None,
) -> Any:
    """An ``MCPServer`` with the six tools, scoped to ``base_ids`` (None: every base); local
    file adds follow ``path_roots`` (:mod:`.mcp_paths`)."""
    # The SDK is imported here, not at module level: importing it takes seconds, and
    # `kb mcp --base nope` should refuse at once (and `kb --help` never import it).
    from mcp.server.mcpserver import Context
    from mcp.types import CallToolResult, ToolAnnotations

    scope = Scope(kb, None if base_ids is None else list(base_ids))

    def _scope(ctx: Context) -> Scope:
        """The server's scope as the calling key sees it (interfaces/mcp/keys.py)."""
        return scope.narrowed(principal_of(ctx))

    roots = list(path_roots or [])
    cites = _Cites()
    server = arguments.server_class()(SERVER_NAME, instructions=INSTRUCTIONS)

    @server.tool(
        name="kb_list",
        title="List knowledge bases / outline one base",
        description=(
            "Without baseId: list the knowledge bases you may use (id, name, item counts, sample "
            "sources, retrieval mode hybrid/bm25/switching, model, capabilities, updatedAt), "
            "filtered by an optional query, paged with limit/cursor. With baseId: that base's "
            "outline (as kb_tree)."
        ),
        annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True),
    )
    def kb_list(
        ctx: Context,
        query: Annotated[
            str | None,
            Field(min_length=1, max_length=200, description="Filter bases by name or content"),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=LIST_MAX_LIMIT)] = LIST_DEFAULT_LIMIT,
        cursor: Annotated[str | None, Field(max_length=200, description="nextCursor")] = None,
        baseId: Annotated[
            str | None, Field(min_length=1, max_length=200, description="Outline this base")
        ] = None,
        maxDepth: Annotated[int | None, Field(ge=0, le=64, description="Outline depth")] = None,
    ) -> CallToolResult:
        return listing.kb_list(
            _scope(ctx), query=query, limit=limit, cursor=cursor, base_id=baseId, max_depth=maxDepth
        )

    @server.tool(
        name="kb_tree",
        title="Outline of a knowledge base",
        description=(
            "The outline of one knowledge base: its folders and documents depth-first, each "
            "document with the conceptId to use with kb_read, kb_grep and kb_manage. maxDepth "
            "limits how deep it goes (0: the top level only)."
        ),
        annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True),
    )
    def kb_tree(
        ctx: Context,
        baseId: Annotated[str, Field(min_length=1, max_length=200)],
        maxDepth: Annotated[int | None, Field(ge=0, le=64, description="Outline depth")] = None,
    ) -> CallToolResult:
        return listing.kb_tree(_scope(ctx), base_id=baseId, max_depth=maxDepth)

    @server.tool(
        name="kb_grep",
        title="Search inside one document",
        description=(
            "A regular-expression search inside one document of a knowledge base, by conceptId: "
            "matching lines with line numbers, character offsets and snippets "
            "(case-insensitive unless ignoreCase=false). Read around a match with kb_read."
        ),
        annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True),
    )
    def kb_grep(
        ctx: Context,
        baseId: Annotated[str, Field(min_length=1, max_length=200)],
        conceptId: Annotated[str, Field(min_length=1, max_length=1000)],
        pattern: Annotated[str, Field(min_length=1, max_length=200, description="A regex")],
        ignoreCase: bool = True,
        maxMatches: Annotated[int | None, Field(ge=1, le=200)] = None,
    ) -> CallToolResult:
        return tools.kb_read(
            _scope(ctx),
            cites,
            base_id=baseId,
            concept_id=conceptId,
            char_start=None,
            char_end=None,
            pattern=pattern,
            ignore_case=ignoreCase,
            max_matches=maxMatches,
        )

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
        annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True),
    )
    def kb_search(
        ctx: Context,
        # The schema states the lengths but the tool checks them: a schema refusal would reach
        # the model as pydantic's raw error text with a URL.
        query: Annotated[
            str,
            Field(
                description="What to find (2 to 200 characters)",
                json_schema_extra={"minLength": QUERY_MIN_CHARS, "maxLength": QUERY_MAX_CHARS},
            ),
        ],
        baseIds: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=200)]],
            Field(min_length=1, max_length=SEARCH_MAX_BASES, description="Bases to search"),
        ],
        under: Annotated[
            str | None,
            Field(
                max_length=1000,
                description="Only documents in this folder: a conceptId prefix such as 'papers'",
            ),
        ] = None,
        types: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=20)]] | None,
            Field(
                max_length=32,
                description="Only these source types: file extensions (pdf, md, docx…), url, note",
            ),
        ] = None,
        since: Annotated[
            str | None,
            Field(
                max_length=64,
                description="Only items updated at or after this ISO date, e.g. 2024-05-01",
            ),
        ] = None,
        context: Annotated[
            int | None,
            Field(
                ge=1,
                le=8000,
                description="Tokens of surroundings per passage (neighbouring chunks, merged);"
                f" default {tools.KB_SEARCH_CONTEXT}",
            ),
        ] = None,
        tags: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=100)]] | None,
            Field(max_length=32, description="Only documents carrying every one of these tags"),
        ] = None,
        where: Annotated[
            dict[str, Any] | None,
            Field(
                description='Metadata conditions, all required, e.g. {"year": {"gte": 2023}, '
                '"lang": {"in": ["en", "de"]}, "team": "infra"}'
            ),
        ] = None,
        topK: Annotated[
            int | None,
            Field(ge=1, le=50, description="At most this many passages (default: 10 a base)"),
        ] = None,
        maxChars: Annotated[
            int,
            Field(
                ge=budget.MIN_MAX_CHARS,
                le=budget.MAX_MAX_CHARS,
                description="The reply's size in characters; passages past it are cut or left "
                "out (each hit first, then context)",
            ),
        ] = budget.DEFAULT_MAX_CHARS,
        alsoQueries: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=QUERY_MAX_CHARS)]] | None,
            Field(
                max_length=4,
                description="Up to 4 more phrasings of the same intent (synonyms, a question "
                "form); each is searched and the lists fuse, passages several find first",
            ),
        ] = None,
    ) -> CallToolResult:
        return tools.kb_search(
            _scope(ctx),
            cites,
            query=query,
            base_ids=baseIds,
            under=under,
            types=types,
            since=since,
            context=context,
            tags=tags,
            where=where,
            top_k=topK,
            max_chars=maxChars,
            also=alsoQueries,
        )

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
        annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True),
    )
    def kb_read(
        ctx: Context,
        baseId: Annotated[str, Field(min_length=1, max_length=200)],
        conceptId: Annotated[str, Field(min_length=1, max_length=1000)],
        charStart: Annotated[int | None, Field(ge=0)] = None,
        charEnd: Annotated[int | None, Field(gt=0)] = None,
        pattern: Annotated[
            str | None, Field(min_length=1, max_length=200, description="Regex: grep mode")
        ] = None,
        ignoreCase: bool = True,
        maxMatches: Annotated[int | None, Field(ge=1, le=200)] = None,
        section: Annotated[str | None, mcp_outline.SECTION] = None,
        cursor: Annotated[str | None, mcp_outline.CURSOR] = None,
        maxTokens: Annotated[int | None, mcp_outline.MAX_TOKENS] = None,
    ) -> CallToolResult:
        if section is not None or cursor is not None:
            args = (baseId, conceptId, section, cursor, maxTokens, (charStart, charEnd, pattern))
            return mcp_outline.read_section(scope, cites, *args)
        return tools.kb_read(
            _scope(ctx),
            cites,
            base_id=baseId,
            concept_id=conceptId,
            char_start=charStart,
            char_end=charEnd,
            pattern=pattern,
            ignore_case=ignoreCase,
            max_matches=maxMatches,
        )

    outline_tool.register(server, _scope)

    manage_tool.register(server, kb, scope, roots, allow_writes=allow_writes)

    return server
