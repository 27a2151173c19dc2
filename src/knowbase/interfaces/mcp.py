"""The MCP server: four agent tools over the ``Knowledge`` facade (§8), stdio or streamable HTTP.

Tools (arguments keep the origin's camelCase): ``kb_list`` (bases, or one base's outline),
``kb_search`` (several bases, merged), ``kb_read`` (a slice, or grep with ``pattern``) and
``kb_manage`` (add a file / URL / note, delete or refresh by Concept ID). This module registers
them (argument schemas, approval) and runs the server; their bodies and result shapes live in
:mod:`.mcp_tools`.

Scope: the server sees the bases it was started with (``base_ids``), or every base when that is
None; an empty list sees none and every tool fails closed. A base outside the scope answers
``Knowledge base "<id>" is not available to this assistant.``

Approval: every ``kb_manage`` call asks the user through MCP form elicitation when the client
declares it; a client without elicitation is refused unless the server runs with
``allow_writes``. The question rides whichever transport the negotiated protocol uses (a
mid-call request before 2026-07-28, ``InputRequiredResult`` after): the SDK's ``Resolve``
machinery picks it.

    python -m knowbase.interfaces.mcp --home ~/kb --base docs            # stdio
    python -m knowbase.interfaces.mcp --http --port 8765 --allow-writes  # streamable HTTP
"""

# No `from __future__ import annotations`: the SDK evaluates tool annotations, and
# `Resolve(approval)` names a closure that string annotations could not see.
import argparse
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from knowbase.catalog.models import Base
from knowbase.errors import KnowbaseError, NotFound
from knowbase.interfaces import mcp_tools as tools
from knowbase.interfaces.mcp_paths import check_local_file
from knowbase.interfaces.mcp_tools import (
    LIST_DEFAULT_LIMIT,
    LIST_MAX_LIMIT,
    MANAGE_MAX_IDS,
    NOTE_MAX_CHARS,
    QUERY_MAX_CHARS,
    QUERY_MIN_CHARS,
    SEARCH_MAX_BASES,
    OutOfScope,
    _add_input,
    _Cites,
    _fail,
    _manage_problem,
)
from knowbase.interfaces.mcp_tools import _camel as _camel  # re-exported (tests)
from knowbase.interfaces.mcp_tools import _decode_cursor as _decode_cursor  # re-exported (tests)
from knowbase.service import Knowledge

log = logging.getLogger(__name__)

SERVER_NAME = "knowbase"
DEFAULT_HTTP_PORT = 8765

INSTRUCTIONS = (
    "Knowledge bases of the user. Start with kb_list to see the bases, kb_list with baseId for "
    "one base's outline (Concept IDs), kb_search to find passages (cite the returned ids), "
    "kb_read to read or grep a document by Concept ID. kb_manage changes a base and needs "
    "the user's approval."
)


# --- scope -------------------------------------------------------------------------------------
@dataclass
class Scope:
    """Which bases the server may see: ``None`` = every base, else exactly these ids."""

    kb: Knowledge
    base_ids: list[str] | None = None
    _allowed: frozenset[str] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._allowed = None if self.base_ids is None else frozenset(self.base_ids)

    @property
    def empty(self) -> bool:
        return self._allowed is not None and not self._allowed

    def bases(self) -> list[Base]:
        if self.empty:
            return []
        return [b for b in self.kb.list_bases() if self._allowed is None or b.id in self._allowed]

    def base(self, ref: str) -> Base:
        """The base ``ref`` names (name or id) when in scope; else :class:`OutOfScope`."""
        if self.empty:
            raise OutOfScope(ref)
        try:
            b = self.kb.get_base(ref)
        except NotFound:
            if self._allowed is None:
                raise
            raise OutOfScope(ref) from None
        if self._allowed is not None and b.id not in self._allowed:
            raise OutOfScope(ref)
        return b


# --- approval ----------------------------------------------------------------------------------
class Approve(BaseModel):
    """What the user answers (form elicitation)."""

    approve: bool = Field(default=True, description="Allow this change to the knowledge base")


@dataclass(frozen=True)
class _Decision:
    """A resolver outcome that is not an elicitation: a refusal or a pre-granted write."""

    granted: bool
    error: dict[str, Any] | None = None


def _client_elicits(ctx: Any) -> bool:
    try:
        caps = ctx.client_capabilities
    except Exception:  # no request context (a direct call): no client to ask
        return False
    e = caps.elicitation if caps is not None else None
    return e is not None and (e.form is not None or e.url is None)


# --- the server --------------------------------------------------------------------------------
def build_server(
    kb: Knowledge,
    *,
    base_ids: list[str] | None,
    allow_writes: bool,
    path_roots: list[Path] | None = None,
) -> Any:
    """An ``MCPServer`` with the four tools, scoped to ``base_ids`` (None: every base); local
    file adds follow ``path_roots`` (:mod:`.mcp_paths`)."""
    # The SDK is imported here, not at module level: importing it takes seconds, and
    # `kb mcp --base nope` should refuse at once (and `kb --help` never import it).
    from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.resolve import Elicit, Resolve
    from mcp.types import CallToolResult, ToolAnnotations

    scope = Scope(kb, None if base_ids is None else list(base_ids))
    roots = list(path_roots or [])
    cites = _Cites()
    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS)

    @server.tool(
        name="kb_list",
        title="List knowledge bases / outline one base",
        description=(
            "Without baseId: list the knowledge bases you may use (id, name, item count, sample "
            "sources), filtered by an optional query, paged with limit/cursor. With baseId: that "
            "base's outline as a depth-first list; documents carry the conceptId to use with "
            "kb_read and kb_manage."
        ),
        annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True),
    )
    def kb_list(
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
        return tools.kb_list(
            scope, query=query, limit=limit, cursor=cursor, base_id=baseId, max_depth=maxDepth
        )

    @server.tool(
        name="kb_search",
        title="Search knowledge bases",
        description=(
            "Search one or more knowledge bases (hybrid keyword + vector search). Returns passages "
            "with a cite id, baseId, conceptId, title and a score in [0, 1], best first. Cite "
            "passages by their id; read around a passage with kb_read."
        ),
        annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True),
    )
    def kb_search(
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
    ) -> CallToolResult:
        return tools.kb_search(
            scope,
            cites,
            query=query,
            base_ids=baseIds,
            under=under,
            types=types,
            since=since,
            context=context,
        )

    @server.tool(
        name="kb_read",
        title="Read or grep a document",
        description=(
            "Read a document of a knowledge base by its conceptId: a slice of at most 20,000 "
            "characters from charStart to charEnd (truncated=true means there is more; continue "
            "from charEnd). With pattern: regex search line by line instead (case-insensitive "
            "unless ignoreCase=false), returning line numbers, offsets and snippets."
        ),
        annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True),
    )
    def kb_read(
        baseId: Annotated[str, Field(min_length=1, max_length=200)],
        conceptId: Annotated[str, Field(min_length=1, max_length=1000)],
        charStart: Annotated[int | None, Field(ge=0)] = None,
        charEnd: Annotated[int | None, Field(gt=0)] = None,
        pattern: Annotated[
            str | None, Field(min_length=1, max_length=200, description="Regex: grep mode")
        ] = None,
        ignoreCase: bool = True,
        maxMatches: Annotated[int | None, Field(ge=1, le=200)] = None,
    ) -> CallToolResult:
        return tools.kb_read(
            scope,
            cites,
            base_id=baseId,
            concept_id=conceptId,
            char_start=charStart,
            char_end=charEnd,
            pattern=pattern,
            ignore_case=ignoreCase,
            max_matches=maxMatches,
        )

    def approval(
        ctx: Context,
        baseId: str,
        action: str,
        type: str | None,
        path: str | None,
        url: str | None,
        content: str | None,
        title: str | None,
        conceptIds: list[str] | None,
    ) -> Any:
        """Decide before the body runs: refuse bad calls, else ask the user (or allow_writes).

        An add is validated here (path exists, type supported, note text, SSRF guard), so the
        user is never asked to approve a call that would fail anyway.
        """
        try:
            b = scope.base(baseId)
        except OutOfScope as exc:
            return _Decision(False, {"error": str(exc)})
        except KnowbaseError as exc:
            return _Decision(False, {"error": exc.message, "code": exc.code})
        problem = _manage_problem(action, type, path, url, conceptIds)
        if problem:
            return _Decision(False, {"error": problem, "code": "invalid_input"})
        if action == "add":
            from knowbase.ingestion.inputs import validate

            try:
                if type == "file":
                    pre_granted = allow_writes and not _client_elicits(ctx)
                    check_local_file(path or "", roots, pre_granted=pre_granted)
                validate(_add_input(kb, b, type, path, url, content, title))
            except KnowbaseError as exc:
                return _Decision(False, {"error": exc.message, "code": exc.code, "hint": exc.hint})
        if action in ("delete", "refresh"):
            # Ask only about documents that exist: the user approves what will really change.
            known = tools.existing_concepts(kb, b, conceptIds or [])
            if not known:
                return _Decision(False, tools.none_of_these(conceptIds or []))
            conceptIds = known
        if _client_elicits(ctx):
            return Elicit(_approval_text(b, action, type, path, url, title, conceptIds), Approve)
        if allow_writes:
            return _Decision(True)
        return _Decision(
            False,
            {
                "error": "kb_manage needs the user's approval, but this client cannot ask for it "
                "(no MCP elicitation support) and the server was not started with "
                "--allow-writes. Nothing was changed; tell the user.",
                "code": "approval_required",
            },
        )

    @server.tool(
        name="kb_manage",
        title="Change a knowledge base",
        description=(
            "Change a knowledge base (always asks the user for approval). action=add with "
            "type=file (absolute path on the user's machine), type=url (http/https) or type=note "
            "(content, optional title); action=delete or action=refresh with conceptIds (from "
            "kb_list outline or kb_search); action=sync brings the base up to date with the "
            "folders, files and pages it was built from (adds new files, reindexes changed ones; "
            "never deletes). Adds and syncs run in the background."
        ),
        annotations=ToolAnnotations(
            readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=True
        ),
    )
    async def kb_manage(
        approved: Annotated[ElicitationResult[Approve], Resolve(approval)],
        baseId: Annotated[str, Field(min_length=1, max_length=200)],
        action: Literal["add", "delete", "refresh", "sync"],
        type: Literal["file", "url", "note"] | None = None,
        path: Annotated[str | None, Field(min_length=1, max_length=4096)] = None,
        url: Annotated[str | None, Field(min_length=1, max_length=8192)] = None,
        content: Annotated[str | None, Field(max_length=NOTE_MAX_CHARS)] = None,
        title: Annotated[str | None, Field(max_length=200)] = None,
        conceptIds: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=1000)]] | None,
            Field(min_length=1, max_length=MANAGE_MAX_IDS),
        ] = None,
    ) -> CallToolResult:
        import anyio

        if isinstance(approved, AcceptedElicitation):
            data = approved.data
            if isinstance(data, _Decision):
                if not data.granted:
                    error = dict(data.error or {})
                    return _fail(str(error.pop("error", "refused")), **error)
            elif not (isinstance(data, Approve) and data.approve):
                return _fail("The user did not approve this change. Nothing was changed.",
                             code="approval_declined")  # fmt: skip
        else:
            return _fail(
                f"The user {approved.action}d this change. Nothing was changed.",
                code="approval_declined",
            )

        def run() -> CallToolResult:
            return tools.kb_manage(
                scope,
                base_id=baseId,
                action=action,
                type=type,
                path=path,
                url=url,
                content=content,
                title=title,
                concept_ids=conceptIds,
            )

        return await anyio.to_thread.run_sync(run)

    return server


def _approval_text(
    b: Base,
    action: str,
    type: str | None,
    path: str | None,
    url: str | None,
    title: str | None,
    ids: list[str] | None,
) -> str:
    if action == "add":
        what = {"file": path, "url": url, "note": f"note {title!r}" if title else "a note"}
        return (
            f"Allow the assistant to add {what.get(type or '', '')} to knowledge base {b.name!r}?"
        )
    listed = ", ".join((ids or [])[:10]) + (" …" if len(ids or []) > 10 else "")
    return f"Allow the assistant to {action} {len(ids or [])} document(s) in {b.name!r}: {listed}?"


# --- running -----------------------------------------------------------------------------------
def resolve_scope(kb: Knowledge, refs: list[str] | None) -> list[str] | None:
    """``--base`` names/ids → ids. None → every base; a list matching nothing refuses to start."""
    if refs is None:
        return None
    ids: list[str] = []
    for ref in refs:
        try:
            ids.append(kb.get_base(ref).id)
        except NotFound:
            log.warning("--base %r matches no knowledge base; ignored", ref)
    if not ids:
        raise NotFound(
            f"--base {', '.join(refs)} matches no knowledge base; refusing to start",
            hint="list the bases with kb base list",
            bases=refs,
        )
    return list(dict.fromkeys(ids))


def run_stdio(
    kb: Knowledge,
    *,
    base_ids: list[str] | None,
    allow_writes: bool,
    path_roots: list[Path] | None = None,
) -> None:
    """Serve over stdin/stdout until the client closes the stream."""
    import anyio

    server = build_server(kb, base_ids=base_ids, allow_writes=allow_writes, path_roots=path_roots)
    anyio.run(server.run_stdio_async)


def run_http(
    kb: Knowledge,
    *,
    base_ids: list[str] | None,
    allow_writes: bool,
    host: str = "127.0.0.1",
    port: int = DEFAULT_HTTP_PORT,
    allowed_hosts: tuple[str, ...] = (),
    path_roots: list[Path] | None = None,
    allowed_origins: tuple[str, ...] = (),
) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until interrupted.

    Host and Origin are checked by :mod:`.http_guard`, the rules ``kb serve`` uses (the SDK's
    own check is turned off rather than kept as a second, different copy); Origin on every
    request, as the SDK did, since an MCP session is state however it is reached.
    """
    import anyio
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    from knowbase.interfaces.http_guard import ALL_METHODS, HostGuard, HostPolicy, is_loopback

    if not is_loopback(host):
        log.warning("MCP over HTTP on %s: anyone who can reach it can use the tools", host)
    server = build_server(kb, base_ids=base_ids, allow_writes=allow_writes, path_roots=path_roots)
    app = server.streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host=host,
    )
    guarded = HostGuard(
        app, HostPolicy.for_bind(host, allowed_hosts, allowed_origins), origin_methods=ALL_METHODS
    )
    config = uvicorn.Config(guarded, host=host, port=port, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)


def serve(
    *,
    home: str | None = None,
    bases: list[str] | None = None,
    allow_writes: bool = False,
    http: bool = False,
    host: str = "127.0.0.1",
    port: int = DEFAULT_HTTP_PORT,
    workers: bool = True,
    allow_path: list[str] | None = None,
) -> None:
    """``kb mcp``: open the home, check the scope, run workers, serve until the client leaves.

    A catalog that cannot be opened does not stop it: every tool answers with the reason
    (``catalog_unavailable``), and ``--base`` is kept as given (ids match once it is back)."""
    from knowbase.interfaces.mcp_paths import resolve_roots
    from knowbase.settings import load_settings

    roots = resolve_roots(allow_path)
    with Knowledge(load_settings(home)) as kb:
        if kb.catalog_problem is not None:
            log.error("%s: %s; serving anyway", kb.catalog_problem.code, kb.catalog_problem)
            base_ids = bases
        else:
            base_ids = resolve_scope(kb, bases)
        if workers:
            kb.start_workers()
        if http:
            run_http(
                kb,
                base_ids=base_ids,
                allow_writes=allow_writes,
                host=host,
                port=port,
                allowed_hosts=kb.settings.allowed_hosts,
                path_roots=roots,
                allowed_origins=kb.settings.allowed_origins,
            )
        else:
            run_stdio(kb, base_ids=base_ids, allow_writes=allow_writes, path_roots=roots)


def main(argv: list[str] | None = None) -> int:
    """``python -m knowbase.interfaces.mcp``: the same options as ``kb mcp``."""
    parser = argparse.ArgumentParser(prog="kb mcp", description="knowbase MCP server")
    parser.add_argument("--home", default=None, help="home directory (env KNOWBASE_HOME)")
    parser.add_argument("--base", action="append", default=None, help="a base it may see")
    parser.add_argument("--allow-writes", action="store_true")
    parser.add_argument("--allow-path", action="append", default=None, help="a root for adds")
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_HTTP_PORT)
    parser.add_argument("--no-workers", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        serve(
            home=args.home,
            bases=args.base,
            allow_writes=args.allow_writes,
            http=args.http,
            host=args.host,
            port=args.port,
            workers=not args.no_workers,
            allow_path=args.allow_path,
        )
    except KnowbaseError as exc:
        print(f"{exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
