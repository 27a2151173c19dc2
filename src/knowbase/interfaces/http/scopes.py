"""Which key may call which route: the one table, and the check every request passes.

Each route of the app has a :class:`Rule` in :data:`ROUTES`, keyed by method and path template:
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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from knowbase.catalog.models import OPEN, Principal
from knowbase.errors import KeyNotAllowed, KnowbaseError, NotFound, Unauthorized

if TYPE_CHECKING:
    from knowbase.catalog.models import Base
    from knowbase.service import Knowledge

Access = Literal["public", "read", "write", "admin"]
Names = Literal["none", "path", "body", "query", "job", "list", "own"]


@dataclass(frozen=True)
class Rule:
    """``access``: what the caller needs. ``names``: where the route names a base (``path``
    is checked here; ``body``, ``query``, ``job`` and ``list`` by the route with
    :func:`visible_base`; ``own``: the route checks keys itself)."""

    access: Access
    names: Names = "path"


R, W, A = Rule("read"), Rule("write"), Rule("admin")
PUBLIC = Rule("public", "none")

#: (method, path template) → rule. HEAD is answered as GET.
ROUTES: dict[tuple[str, str], Rule] = {
    # bases
    ("GET", "/bases"): Rule("read", "list"),
    ("POST", "/bases"): Rule("admin", "none"),
    ("GET", "/bases/{base}"): R,
    ("PATCH", "/bases/{base}"): W,  # settings
    ("DELETE", "/bases/{base}"): A,
    ("POST", "/bases/{base}/restore"): A,  # makes a new base
    ("POST", "/bases/{base}/enable-embedding"): W,
    ("POST", "/bases/{base}/embedding-model"): W,
    ("GET", "/bases/{base}/model-switch"): R,
    # items
    ("POST", "/bases/{base}/items"): W,
    ("GET", "/bases/{base}/items"): R,
    ("POST", "/bases/{base}/uploads"): W,
    ("POST", "/bases/{base}/uploads/folders"): W,
    ("GET", "/bases/{base}/items/{item_id}"): R,
    ("DELETE", "/bases/{base}/items/{item_id}"): W,
    ("POST", "/bases/{base}/items/{item_id}/reindex"): W,
    ("GET", "/bases/{base}/items/{item_id}/chunks"): R,
    ("PATCH", "/bases/{base}/items/{item}/labels"): W,
    ("POST", "/bases/{base}/sync"): W,
    # search and concepts
    ("GET", "/bases/{base}/search"): R,
    ("POST", "/bases/{base}/search"): R,
    ("POST", "/search"): Rule("read", "body"),
    ("GET", "/bases/{base}/concepts/read"): R,
    ("GET", "/bases/{base}/concepts/grep"): R,
    ("GET", "/bases/{base}/concepts/tree"): R,
    ("POST", "/bases/{base}/concepts/delete"): W,
    ("POST", "/bases/{base}/concepts/refresh"): W,
    # jobs, events, status
    ("GET", "/jobs"): Rule("read", "query"),
    ("GET", "/bases/{base}/jobs"): R,
    ("POST", "/bases/{base}/jobs/cancel"): W,
    ("GET", "/jobs/{job_id}"): Rule("read", "job"),
    ("GET", "/bases/{base}/events"): R,
    ("GET", "/bases/{base}/summary"): R,
    ("GET", "/status"): Rule("read", "list"),
    ("GET", "/embedding-models"): Rule("read", "none"),
    # Dify's external knowledge API: its own keys and error shape (interfaces/http/external.py)
    ("POST", "/retrieval"): Rule("read", "own"),
    ("POST", "/dify/retrieval"): Rule("read", "own"),
    ("POST", "//retrieval"): Rule("read", "own"),
    ("POST", "/dify//retrieval"): Rule("read", "own"),
    # the console's pages hold no data (their scripts call the routes above) and the schema
    ("GET", "/"): PUBLIC,
    ("GET", "/console/bases/{base}"): PUBLIC,
    ("GET", "/console/search"): PUBLIC,
    ("GET", "/console/view"): PUBLIC,
    ("GET", "/console/static/{name}"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
}

#: The console's scripts send this header so the jobs they start say ``console``.
SURFACE_HEADER = "x-knowbase-surface"


def rule_for(method: str, path: str) -> Rule | None:
    """The rule of a route (``HEAD`` as ``GET``), None when the table has none."""
    return ROUTES.get(("GET" if method == "HEAD" else method, path))


def principal_of(request: Request) -> Principal:
    """Who the request acts as (set by :func:`authorize`; a route not behind it: open)."""
    return getattr(request.state, "principal", OPEN)


def visible_base(kb: Knowledge, principal: Principal, ref: str) -> Base:
    """The base ``ref`` names, when the principal may see it; else the ``NotFound`` an unknown
    base gets, word for word (a scoped key learns nothing of the other bases)."""
    base = kb.get_base(ref)  # raises the unknown base's NotFound
    if not principal.sees(base.id):
        raise NotFound(f"no knowledge base named or with id {ref!r}", base=ref)
    return base


def visible_ids(principal: Principal) -> frozenset[str] | None:
    """The base ids a listing keeps (None: every base)."""
    return principal.base_ids


class RouteWithoutScope(KnowbaseError):
    """A route has no rule in :data:`ROUTES`: nobody may call it until it gets one."""

    code = "route_without_scope"


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
        principal = kb.authenticate(token, admin_token=request.app.state.admin_token)
    except Unauthorized as exc:
        raise HTTPException(401, exc.message, headers={"WWW-Authenticate": "Bearer"}) from None
    request.state.principal = principal
    if rule.names == "path" and principal.base_ids is not None:
        visible_base(kb, principal, request.path_params["base"])
    if not principal.allows(rule.access):
        raise KeyNotAllowed(
            f"the key {principal.name!r} has {principal.access} access; this needs {rule.access}",
            key=principal.name,
            needs=rule.access,
        )
    surface = "console" if request.headers.get(SURFACE_HEADER) == "console" else "http"
    # Set for the rest of this request (its task, and the threads its sync route runs in).
    kb.act_as(principal.name, surface)


__all__ = [
    "ROUTES",
    "SURFACE_HEADER",
    "Rule",
    "authorize",
    "principal_of",
    "rule_for",
    "visible_base",
    "visible_ids",
]
