"""The HTTP API: every facade operation as a resource (FastAPI, OpenAPI at ``/openapi.json``).

    app = create_app(kb, token=os.environ.get("KNOWBASE_API_TOKEN"))
    uvicorn.run(app, host="127.0.0.1", port=8765)

Surfaces translate, ``Knowledge`` decides: routes parse, call one facade method and render its
value objects; one error edge turns every :class:`KnowbaseError` into ``{code, message, details}``
with the error's own HTTP status (validation 422, not found 404, guard refusal 409, unavailable
503, provider 502). Request validation, unknown routes, auth and size-limit failures use the same
shape. Routes live in :mod:`.bases`, :mod:`.items`, :mod:`.labels`, :mod:`.query`,
:mod:`.outline`, :mod:`.events` and :mod:`.sync`; what they share (the facade dependency, the
error shape) in :mod:`.common`.

Every request passes :mod:`.guard` first: a ``Host`` the server does not answer to gets 421
(DNS rebinding), a state-changing request from a foreign ``Origin`` 403.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from knowbase.errors import InvalidInput, KnowbaseError
from knowbase.interfaces.http import openapi
from knowbase.interfaces.http.common import (
    BODY_ERRORS,
    COMMON_ERRORS,
    error_response,
    error_responses,
    get_kb,
    jsonable,
)
from knowbase.interfaces.http.guard import HostGuard, HostPolicy
from knowbase.interfaces.http.retry import RetryPassingFaults

if TYPE_CHECKING:
    from knowbase.service import Knowledge

log = logging.getLogger(__name__)

DEFAULT_MAX_UPLOAD_BYTES = 100 * 1024 * 1024
#: Any body that is not a multipart upload (JSON): a note of ``NOTE_MAX_CHARS`` characters fits
#: even when every one is sent as a ``\\uXXXX`` escape. Parsing JSON costs a few times its size
#: in memory, so a body the size of an upload would cost hundreds of MB before its 422.
DEFAULT_MAX_JSON_BYTES = 8 * 1024 * 1024
HTTP_CODES = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


async def _knowbase_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, KnowbaseError)
    if exc.status >= 500 and exc.status != 503:
        log.warning("%s %s: %s", request.method, request.url.path, exc.to_dict())
    body = jsonable(exc.to_dict())
    return JSONResponse(body, status_code=exc.status)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg")), "type": e.get("type")}
        for e in exc.errors()
    ]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    where = ".".join(first["loc"])
    return error_response(
        422, InvalidInput.code, f"invalid request: {where}: {first['msg']}", {"errors": errors}
    )


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 400:  # FastAPI's body parse error (bad UTF-8, bad form): bad input
        return error_response(
            422, InvalidInput.code, f"could not parse the request body ({exc.detail})"
        )
    code = HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(_allowed_methods(request))
    return error_response(
        exc.status_code, code, str(exc.detail), getattr(exc, "details", None), **headers
    )


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves on this path: Starlette's own 405 names only the first
    route's. Asks each route whether it would fully match the request with that method."""
    routes = request.app.router.routes
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in routes):
            allowed.append(method)
    return allowed


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal_error", f"internal error ({type(exc).__name__})")


class TooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds {limit:,} bytes")
        self.details = {"max_bytes": limit}


class BodyLimit:
    """Refuse bodies over ``limit`` bytes (``json_limit`` for any body that is not a multipart
    upload): by Content-Length up front, else while streaming.

    Raised inside ``receive`` as an HTTPException so FastAPI's body parsing re-raises it (it
    turns other exceptions into a 400) and the app's handler renders the 413 error shape.
    """

    def __init__(self, app: ASGIApp, limit: int, json_limit: int | None = None) -> None:
        self.app, self.limit = app, limit
        self.json_limit = min(limit, json_limit or limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", ()))
        multipart = headers.get(b"content-type", b"").lower().startswith(b"multipart/form-data")
        limit = self.limit if multipart else self.json_limit
        try:
            declared = int(headers.get(b"content-length", b"0"))
        except ValueError:
            declared = 0
        if declared > limit:
            response = error_response(
                413,
                "payload_too_large",
                f"request body exceeds {limit:,} bytes",
                {"max_bytes": limit, "content_length": declared},
            )
            await response(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise TooLarge(limit)
            return message

        await self.app(scope, limited, send)


def create_app(
    kb: Knowledge,
    *,
    token: str | None = None,
    require_token: bool = False,
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
    local_path_roots: list[Path] | None = None,
    search_concurrency: int | None = None,
    host: str = "127.0.0.1",
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
) -> FastAPI:
    """The API over ``kb``. The caller owns ``kb`` (open and close it around the server).

    ``host``: the address the server binds; with ``allowed_hosts`` (``Settings.allowed_hosts``)
    it decides which ``Host`` headers are served; only the server's own origin and
    ``allowed_origins`` may change state
    (:class:`~knowbase.interfaces.http.guard.HostPolicy`).

    ``token``: the admin key (``KNOWBASE_API_TOKEN``). Routes take it or a scoped key
    (``kb keys create``) as ``Authorization: Bearer <key>``, by the table in
    :mod:`.scopes`; with no token and no live key the server is open. ``require_token``
    refuses to build an app without one (``kb serve`` sets it for non-loopback hosts).
    ``local_path_roots``: ``file``/``directory`` inputs must resolve under one of them (none →
    local-path adds are refused; uploads always work). ``max_upload_bytes`` bounds any body,
    :data:`DEFAULT_MAX_JSON_BYTES` any that is not a multipart upload.
    ``search_concurrency``: searches run at most this many at a time, the rest queue (default:
    the CPU count, at most 4).
    """
    if require_token and not token:
        raise InvalidInput(
            "a bearer token is required: set KNOWBASE_API_TOKEN",
            hint="binding a non-loopback address needs KNOWBASE_API_TOKEN",
        )
    if max_upload_bytes < 1:
        raise InvalidInput("max_upload_bytes must be positive", max_upload_bytes=max_upload_bytes)
    from knowbase.interfaces.http.scopes import authorize

    # Every route passes the key check (interfaces/http/scopes.py: the route table); 403 also
    # comes from the guard in front of every route (a foreign Origin), 421 from it alone.
    dependencies = [Depends(authorize)]
    responses = error_responses(401, 403, 421)
    app = FastAPI(
        title="knowbase",
        version="0.1.0",
        summary="Local-first knowledge bases: bases, items, hybrid search, concepts, jobs.",
        # /docs is the console's own page (interfaces/console/): Swagger UI and ReDoc load
        # their scripts from a CDN and show nothing offline.
        docs_url=None,
        redoc_url=None,
        dependencies=dependencies,
        responses=responses,
    )
    app.state.kb = kb
    app.state.admin_token = token
    app.state.search_concurrency = max(1, search_concurrency or min(4, os.cpu_count() or 1))
    app.state.search_limiter = None
    app.state.max_upload_bytes = max_upload_bytes
    app.state.local_path_roots = [Path(r).expanduser().resolve() for r in local_path_roots or []]
    _handle_errors_and_guard(app, host, allowed_hosts, allowed_origins)
    _mount_routes(app, kb, token)
    return app


def _handle_errors_and_guard(
    app: FastAPI, host: str, allowed_hosts: Iterable[str], allowed_origins: Iterable[str]
) -> None:
    """Every error as the API's error shape, and the middleware in front of every route."""
    app.add_exception_handler(KnowbaseError, _knowbase_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)
    # Innermost of the three: a GET that met a passing database fault runs once more.
    app.add_middleware(RetryPassingFaults)
    limit = app.state.max_upload_bytes
    app.add_middleware(BodyLimit, limit=limit, json_limit=DEFAULT_MAX_JSON_BYTES)
    # Added last, so it runs first: a refused Host or Origin never reaches auth or the body.
    app.add_middleware(HostGuard, policy=HostPolicy.for_bind(host, allowed_hosts, allowed_origins))


def _mount_routes(app: FastAPI, kb: Knowledge, token: str | None) -> None:
    """The API's routes, the console at ``/``, Dify's external API when configured, and the
    OpenAPI document that describes them."""
    from knowbase.interfaces import console
    from knowbase.interfaces.http import bases, events, items, labels, outline, query, sync

    for module in (bases, items, labels, query, outline, events, sync):
        app.include_router(module.router)
    app.include_router(console.router)  # the web console at / (interfaces/console/)
    # kb is None only where a test builds the app for its OpenAPI schema alone
    external_keys = kb.settings.external_api_keys if kb is not None else ()
    if external_keys or (kb is not None and token):
        # Dify's external knowledge API, off until a Dify key or the API token is configured
        from knowbase.interfaces.http.external import build_router

        app.include_router(build_router(external_keys))
    openapi.install(
        app, dify=bool(external_keys) or (kb is not None and bool(token)), token=bool(token)
    )


__all__ = [
    "BODY_ERRORS",
    "COMMON_ERRORS",
    "DEFAULT_MAX_JSON_BYTES",
    "DEFAULT_MAX_UPLOAD_BYTES",
    "create_app",
    "error_response",
    "error_responses",
    "get_kb",
]
