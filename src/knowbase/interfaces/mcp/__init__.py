"""The MCP server: seven agent tools over the ``Knowledge`` facade (§8), stdio or streamable HTTP.

Tools (arguments keep the origin's camelCase): ``kb_list`` (bases with their mode, model and
freshness, or one base's outline), ``kb_tree`` (the outline), ``kb_search`` (several bases,
merged), ``kb_outline`` (one document's sections), ``kb_read`` (a slice, one section with
``section``, or grep with ``pattern``), ``kb_grep`` (a regex inside one document) and
``kb_manage`` (add a file / URL / note, delete or refresh by Concept ID, sync).
This module builds the server; the tools are registered by :mod:`.read_tools` (``kb_list``,
``kb_tree``, ``kb_grep``, ``kb_read``), :mod:`.search_tool`, :mod:`.outline_tool` and
:mod:`.manage_tool` (approval), their argument types declared once in :mod:`.params`. Their
bodies and result shapes live in :mod:`.tools`, :mod:`.manage` and :mod:`.listing`, argument
errors in :mod:`.arguments`, the reply budget in :mod:`.budget`, outlines and sections in
:mod:`.outline`, the scope in :mod:`.scope`, running the server in :mod:`.run`.

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
from typing import Any

from knowbase.interfaces.mcp import (
    arguments,
    manage_tool,
    outline_tool,
    read_tools,
    search_tool,
)
from knowbase.interfaces.mcp.keys import principal_of
from knowbase.interfaces.mcp.listing import _decode_cursor as _decode_cursor  # re-exported
from knowbase.interfaces.mcp.scope import Scope as Scope  # re-exported (tests)
from knowbase.interfaces.mcp.scope import resolve_scope as resolve_scope  # re-exported
from knowbase.interfaces.mcp.tools import _camel as _camel  # re-exported (tests)
from knowbase.interfaces.mcp.tools import _Cites
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
    """An ``MCPServer`` with the seven tools, scoped to ``base_ids`` (None: every base); local
    file adds follow ``path_roots`` (:mod:`.paths`)."""
    # The SDK is imported inside the registering functions, not at module level: importing it
    # takes seconds, and `kb mcp --base nope` should refuse at once (and `kb --help` never
    # import it).
    scope = Scope(kb, None if base_ids is None else list(base_ids))

    def _scope(ctx: Any) -> Scope:
        """The server's scope as the calling key sees it (interfaces/mcp/keys.py)."""
        return scope.narrowed(principal_of(ctx))

    roots = list(path_roots or [])
    cites = _Cites()
    server = arguments.server_class()(SERVER_NAME, instructions=INSTRUCTIONS)
    read_tools.register(server, _scope, cites)
    search_tool.register(server, _scope, cites)
    outline_tool.register(server, _scope)
    manage_tool.register(server, kb, scope, roots, allow_writes=allow_writes)
    return server
