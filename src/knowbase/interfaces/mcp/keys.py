"""Keys for MCP over HTTP: who each request acts as, and what its tools may see and do.

:class:`KeyCheck` sits in front of the streamable HTTP app (``kb mcp --http``) and checks the
bearer token of every request the way ``kb serve`` does (``Knowledge.authenticate``):
``KNOWBASE_API_TOKEN`` is the admin, a key from ``kb keys create`` acts with its access and
bases, anything else is 401 -- unless there is neither a token nor a live key (open, as
before keys). The principal rides the request's ASGI ``state``; the SDK hands the tool the
request (``ctx.request_context.request``), so :func:`principal_of` reads it there, per call,
never from the session (a session id is not a credential).

What a tool may do is :data:`knowbase.interfaces.access.TOOLS`: a key's other bases are out of
the server's scope for it (:meth:`Scope.narrowed`: "not available to this assistant", as a
base that does not exist), and ``kb_manage`` needs write access. Stdio has no keys: the user
who starts it is the admin.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from knowbase import OPEN, Principal
from knowbase.errors import Unauthorized

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from knowbase.service import Knowledge

STATE_KEY = "knowbase_principal"


class KeyCheck:
    """ASGI middleware: 401 for a request without a usable key, else the principal in
    ``scope["state"]``; other scopes (lifespan) pass through."""

    def __init__(self, app: ASGIApp, kb: Knowledge, admin_token: str | None) -> None:
        self.app, self.kb, self.admin_token = app, kb, admin_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = None
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                kind, _, given = value.decode("latin-1").partition(" ")
                token = given.strip() if kind.lower() == "bearer" else None
                break
        try:
            principal = await anyio.to_thread.run_sync(self._authenticate, token)
        except Unauthorized as exc:
            await _refuse(send, exc)
            return
        scope.setdefault("state", {})[STATE_KEY] = principal
        await self.app(scope, receive, send)

    def _authenticate(self, token: str | None) -> Principal:
        return self.kb.authenticate(token, admin_token=self.admin_token)


def principal_of(ctx: Any) -> Principal:
    """Who the tool call acts as: the principal :class:`KeyCheck` put on its HTTP request;
    stdio (no request) is the user who started the server."""
    try:
        request = ctx.request_context.request
    except (AttributeError, ValueError):
        return OPEN
    state = getattr(request, "scope", {}).get("state") or {}
    return state.get(STATE_KEY, OPEN)


def not_allowed(principal: Principal) -> dict[str, str]:
    """The refusal of a change to a key without write access (a tool result, not an HTTP
    status: the session is fine, this call is not)."""
    return {
        "error": f"The key {principal.name!r} may only read: kb_manage needs a key with write"
        " access. Nothing was changed; tell the user.",
        "code": "key_not_allowed",
    }


async def _refuse(send: Send, exc: Unauthorized) -> None:
    body = json.dumps(exc.to_dict()).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode("ascii")),
                (b"www-authenticate", b"Bearer"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


__all__ = ["STATE_KEY", "KeyCheck", "not_allowed", "principal_of"]
