"""Which key may call which route: the check every HTTP request passes.

Each route of the app has a rule in :data:`knowbase.interfaces.access.ROUTES` (the one table of
scope rules, MCP tools included), keyed by method and path template:
the access it needs (``read`` < ``write`` < ``admin``; ``public`` needs no key) and where it
names a base (``path``: ``{base}``; ``body``/``query``/``job``/``list``: the route narrows what
it reads by the caller's bases itself, with :func:`visible_base` and :func:`principal_of`).
A route missing from the table answers 500 ``route_without_scope`` to everyone (fail closed),
and ``tests/interfaces/test_http_key_matrix.py`` fails on it: a new route needs a rule.

The check (:func:`authorize`, an app-wide dependency), in order:

1. the bearer token names who acts (``Knowledge.authenticate``): ``KNOWBASE_API_TOKEN`` is the
   admin, a key acts with its access and bases; none, a wrong, an expired or a revoked one is
   401 -- unless the server has neither a token nor a live key, which is open, as before keys;
2. a base outside the key's bases is 404 with the very answer an unknown base gets, *before*
   the access check, so no answer tells a scoped key which other bases exist;
3. an access the key lacks is 403 ``key_not_allowed`` (a read-only key adding, deleting,
   reindexing, changing settings; a scoped key creating or deleting a base);
4. the request acts as the key from then on: each job it enqueues records the key's name and
   the surface (``http``; ``console`` for the console's own scripts).

Dify's ``/retrieval`` checks its keys itself (it answers in Dify's error shape): its rule says
``own``; it takes the same keys and applies :func:`visible_base` to ``knowledge_id``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from knowbase import OPEN, Principal
from knowbase.errors import KeyNotAllowed, RouteWithoutScope, Unauthorized, Unavailable
from knowbase.interfaces.access import rule_for

if TYPE_CHECKING:
    from knowbase import Base
    from knowbase.service import Knowledge

STATUS_PATH = "/status"
#: The console's scripts send this header so the jobs they start say ``console``.
SURFACE_HEADER = "x-knowbase-surface"


def principal_of(request: Request) -> Principal:
    """Who the request acts as (set by :func:`authorize`; a route not behind it: open)."""
    return getattr(request.state, "principal", OPEN)


def visible_base(kb: Knowledge, principal: Principal, ref: str) -> Base:
    """The base ``ref`` names, when the principal may see it; else the ``NotFound`` an unknown
    base gets, word for word (a scoped key learns nothing of the other bases)."""
    return kb.get_visible_base(ref, principal)


def visible_ids(principal: Principal) -> frozenset[str] | None:
    """The base ids a listing keeps (None: every base)."""
    return principal.base_ids


_bearer = HTTPBearer(
    auto_error=False, description="KNOWBASE_API_TOKEN (the admin) or a key from kb keys create"
)


async def authorize(
    request: Request, creds: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> None:
    """The app-wide check (module docstring). Raises 401 (with ``WWW-Authenticate``), 404 for
    a base the key does not see, 403 for an access it lacks."""
    kb: Knowledge | None = request.app.state.kb
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    rule = rule_for(request.method, path)
    if rule is None:
        raise RouteWithoutScope(f"{request.method} {path} has no scope rule", path=path)
    if rule.access == "public" or rule.names == "own" or kb is None:
        return
    # Read the scheme by hand as well: HTTPBearer drops a token sent without "Bearer ".
    token = creds.credentials if creds and creds.scheme.lower() == "bearer" else None
    try:
        # inline, not in the threadpool: a token's key is remembered for a second, so this is
        # a few microseconds but for one catalog read a second (service/keys.py)
        principal = kb.authenticate(token, admin_token=request.app.state.admin_token)
    except Unauthorized as exc:
        raise HTTPException(401, exc.message, headers={"WWW-Authenticate": "Bearer"}) from None
    except Unavailable:
        # Keys live in the catalog. When it cannot be read, a server without an API token still
        # answers /status (why it is down, what to do); every other route fails with 503.
        if path != STATUS_PATH or token is not None:
            raise
        principal = OPEN
    request.state.principal = principal
    if rule.names == "path" and principal.base_ids is not None:  # a catalog read: off the loop
        await run_in_threadpool(visible_base, kb, principal, request.path_params["base"])
    if not principal.allows(rule.access):
        raise KeyNotAllowed(
            f"the key {principal.name!r} has {principal.access} access; this needs {rule.access}",
            key=principal.name,
            needs=rule.access,
        )
    surface = "console" if request.headers.get(SURFACE_HEADER) == "console" else "http"
    # Set for the rest of this request (its task, and the threads its sync route runs in).
    kb.act_as(principal.name, surface)


__all__ = ["SURFACE_HEADER", "authorize", "principal_of", "visible_base", "visible_ids"]
