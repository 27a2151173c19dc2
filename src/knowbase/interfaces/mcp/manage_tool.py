"""Registers ``kb_manage`` on the server: the approval that decides before its body runs (bad
calls refused, else the user asked through MCP elicitation, or ``allow_writes``), and the tool
(its body is :func:`.manage.kb_manage`). Over HTTP it needs a write key (:mod:`.keys`).
"""

# No `from __future__ import annotations`: the SDK evaluates tool annotations, and
# `Resolve(approval)` names a closure that string annotations could not see.
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from knowbase.errors import KnowbaseError
from knowbase.interfaces.access import TOOLS
from knowbase.interfaces.mcp import keys, manage
from knowbase.interfaces.mcp.approval import Approve, _approval_text, _client_elicits, _Decision
from knowbase.interfaces.mcp.keys import principal_of
from knowbase.interfaces.mcp.manage import _add_input, _manage_problem
from knowbase.interfaces.mcp.paths import check_local_file
from knowbase.interfaces.mcp.scope import OutOfScope, Scope
from knowbase.interfaces.mcp.tools import MANAGE_MAX_IDS, NOTE_MAX_CHARS, _fail
from knowbase.service import Knowledge


def register(
    server: Any, kb: Knowledge, scope: Scope, roots: list[Path], *, allow_writes: bool
) -> None:
    """Add ``kb_manage`` to ``server``, acting within ``scope`` as each call's key sees it."""
    from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.resolve import Elicit, Resolve
    from mcp.types import CallToolResult, ToolAnnotations

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
        who = principal_of(ctx)
        try:
            b = scope.narrowed(who).base(baseId)  # another base first: it must not be named
        except OutOfScope as exc:
            return _Decision(False, {"error": str(exc)})
        except KnowbaseError as exc:
            return _Decision(False, {"error": exc.message, "code": exc.code})
        if not who.allows(TOOLS["kb_manage"].access):
            return _Decision(False, keys.not_allowed(who))
        problem = _manage_problem(action, type, path, url, conceptIds)
        if problem:
            return _Decision(False, {"error": problem, "code": "invalid_input"})
        if action == "add":
            from knowbase import validate_input

            try:
                if type == "file":
                    pre_granted = allow_writes and not _client_elicits(ctx)
                    check_local_file(path or "", roots, pre_granted=pre_granted)
                validate_input(_add_input(kb, b, type, path, url, content, title))
            except KnowbaseError as exc:
                return _Decision(False, {"error": exc.message, "code": exc.code, "hint": exc.hint})
        if action in ("delete", "refresh"):
            # Ask only about documents that exist: the user approves what will really change.
            known = manage.existing_concepts(kb, b, conceptIds or [])
            if not known:
                return _Decision(False, manage.none_of_these(conceptIds or []))
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
            "(content, optional title), each optionally with tags and metadata; action=delete "
            "or action=refresh with conceptIds (from kb_list outline or kb_search); action=sync "
            "brings the base up to date with the folders, files and pages it was built from "
            "(adds new files, reindexes changed ones; never deletes). Adds and syncs run in the "
            "background."
        ),
        annotations=ToolAnnotations(
            readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=True
        ),
    )
    async def kb_manage(
        ctx: Context,
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
        tags: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=100)]] | None,
            Field(max_length=64, description="add: tags for the new item"),
        ] = None,
        metadata: Annotated[
            dict[str, Any] | None,
            Field(description="add: metadata for the new item (text, numbers, lists of them)"),
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

        who = principal_of(ctx)

        def run() -> CallToolResult:
            with kb.acting_as(who.name, "mcp"):  # its jobs record the key (jobs/actor.py)
                return manage.kb_manage(
                    scope.narrowed(who),
                    base_id=baseId,
                    action=action,
                    type=type,
                    path=path,
                    url=url,
                    content=content,
                    title=title,
                    concept_ids=conceptIds,
                    tags=tags,
                    metadata=metadata,
                )

        return await anyio.to_thread.run_sync(run)
