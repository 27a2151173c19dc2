"""Registers ``kb_manage`` on the server: the approval that decides before its body runs (bad
calls refused, else the user asked through MCP elicitation, or ``allow_writes``), and the tool
(its body is :func:`.manage.kb_manage`). Over HTTP it needs a write key (:mod:`.keys`).
"""

# No `from __future__ import annotations`: the SDK evaluates tool annotations, and
# `Resolve(approval)` names a closure that string annotations could not see.
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from knowbase import Base
from knowbase.errors import KnowbaseError
from knowbase.interfaces.access import TOOLS
from knowbase.interfaces.mcp import keys, manage
from knowbase.interfaces.mcp.approval import Approve, _approval_text, _client_elicits, _Decision
from knowbase.interfaces.mcp.keys import principal_of
from knowbase.interfaces.mcp.manage import _add_input, _manage_problem
from knowbase.interfaces.mcp.params import (
    BaseId,
    ConceptIds,
    LocalPath,
    NewMetadata,
    NewTags,
    NoteContent,
    NoteTitle,
    Url,
)
from knowbase.interfaces.mcp.paths import check_local_file
from knowbase.interfaces.mcp.scope import OutOfScope, Scope
from knowbase.interfaces.mcp.tools import _fail
from knowbase.service import Knowledge


@dataclass
class _Writes:
    """What a ``kb_manage`` call acts with: the facade, the server's scope, the folders local
    files may come from, and whether writes are granted without asking."""

    kb: Knowledge
    scope: Scope
    roots: list[Path]
    allow_writes: bool

    def decide(
        self,
        ctx: Any,
        base_id: str,
        action: str,
        type: str | None,
        path: str | None,
        url: str | None,
        content: str | None,
        title: str | None,
        concept_ids: list[str] | None,
    ) -> Any:
        """Decide before the body runs: refuse bad calls, else ask the user (or allow_writes).

        An add is validated here (path exists, type supported, note text, SSRF guard), so the
        user is never asked to approve a call that would fail anyway.
        """
        from mcp.server.mcpserver.resolve import Elicit

        who = principal_of(ctx)
        try:
            b = self.scope.narrowed(who).base(base_id)  # another base first: it must not be named
        except OutOfScope as exc:
            return _Decision(False, {"error": str(exc)})
        except KnowbaseError as exc:
            return _Decision(False, {"error": exc.message, "code": exc.code})
        if not who.allows(TOOLS["kb_manage"].access):
            return _Decision(False, keys.not_allowed(who))
        problem = _manage_problem(action, type, path, url, concept_ids)
        if problem:
            return _Decision(False, {"error": problem, "code": "invalid_input"})
        if action == "add":
            refused = self._refused_add(ctx, b, type, path, url, content, title)
            if refused is not None:
                return refused
        if action in ("delete", "refresh"):
            # Ask only about documents that exist: the user approves what will really change.
            known = manage.existing_concepts(self.kb, b, concept_ids or [])
            if not known:
                return _Decision(False, manage.none_of_these(concept_ids or []))
            concept_ids = known
        if _client_elicits(ctx):
            return Elicit(_approval_text(b, action, type, path, url, title, concept_ids), Approve)
        if self.allow_writes:
            return _Decision(True)
        return _Decision(False, APPROVAL_REQUIRED)

    def _refused_add(
        self,
        ctx: Any,
        b: Base,
        type: str | None,
        path: str | None,
        url: str | None,
        content: str | None,
        title: str | None,
    ) -> "_Decision | None":
        from knowbase import validate_input

        try:
            if type == "file":
                pre_granted = self.allow_writes and not _client_elicits(ctx)
                check_local_file(path or "", self.roots, pre_granted=pre_granted)
            validate_input(_add_input(self.kb, b, type, path, url, content, title))
        except KnowbaseError as exc:
            return _Decision(False, {"error": exc.message, "code": exc.code, "hint": exc.hint})
        return None


APPROVAL_REQUIRED = {
    "error": "kb_manage needs the user's approval, but this client cannot ask for it (no MCP "
    "elicitation support) and the server was not started with --allow-writes. Nothing was "
    "changed; tell the user.",
    "code": "approval_required",
}


def _not_approved(approved: Any) -> Any:
    """The tool's answer when the approval refused the call or the user declined, else None."""
    from mcp.server.elicitation import AcceptedElicitation

    if isinstance(approved, AcceptedElicitation):
        data = approved.data
        if isinstance(data, _Decision):
            if not data.granted:
                error = dict(data.error or {})
                return _fail(str(error.pop("error", "refused")), **error)
        elif not (isinstance(data, Approve) and data.approve):
            return _fail("The user did not approve this change. Nothing was changed.",
                         code="approval_declined")  # fmt: skip
        return None
    return _fail(
        f"The user {approved.action}d this change. Nothing was changed.",
        code="approval_declined",
    )


def register(
    server: Any, kb: Knowledge, scope: Scope, roots: list[Path], *, allow_writes: bool
) -> None:
    """Add ``kb_manage`` to ``server``, acting within ``scope`` as each call's key sees it."""
    from mcp.server.elicitation import ElicitationResult
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.resolve import Resolve
    from mcp.types import CallToolResult, ToolAnnotations

    writes = _Writes(kb, scope, roots, allow_writes)

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
        # the SDK passes the tool's arguments by name: this signature is what it reads
        return writes.decide(ctx, baseId, action, type, path, url, content, title, conceptIds)

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
        baseId: BaseId,
        action: Literal["add", "delete", "refresh", "sync"],
        type: Literal["file", "url", "note"] | None = None,
        path: LocalPath = None,
        url: Url = None,
        content: NoteContent = None,
        title: NoteTitle = None,
        conceptIds: ConceptIds = None,
        tags: NewTags = None,
        metadata: NewMetadata = None,
    ) -> CallToolResult:
        import anyio

        refusal = _not_approved(approved)
        if refusal is not None:
            return refusal
        who = principal_of(ctx)

        def run() -> CallToolResult:
            with kb.acting_as(who.name, "mcp"):  # its jobs record the key (jobs/actor.py)
                return manage.kb_manage(
                    scope.narrowed(who), base_id=baseId, action=action, type=type, path=path,
                    url=url, content=content, title=title, concept_ids=conceptIds, tags=tags,
                    metadata=metadata,
                )  # fmt: skip

        return await anyio.to_thread.run_sync(run)
