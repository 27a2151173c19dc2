"""What every route module of the HTTP API shares: the facade dependency and the error shape.

Apart from the app (:mod:`knowbase.interfaces.http`), which imports the route modules and the
console to mount them: a route or the console imports this module, never the app back.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import JSONResponse

from knowbase.interfaces.http.models import ErrorBody

if TYPE_CHECKING:
    from knowbase.service import Knowledge

_DESCRIPTIONS = {
    401: "missing, wrong, expired or revoked key (KNOWBASE_API_TOKEN or a kb keys key)",
    403: "the key's access does not cover the operation (key_not_allowed), or a"
    " state-changing request from a foreign Origin (origin_not_allowed)",
    404: "the base, item, concept or job does not exist",
    409: "a guard refused the operation, or detect-strategy conflicts (details.conflicts)",
    413: "the request body is larger than the server's limit",
    421: "the Host header names a host this server does not answer to (host_not_allowed)",
    422: "invalid input; nothing was written",
    502: "a provider answered something unusable",
    503: "a component (index, provider) cannot be reached right now",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries with the error shape for ``statuses``."""
    return {s: {"model": ErrorBody, "description": _DESCRIPTIONS[s]} for s in statuses}


COMMON_ERRORS = error_responses(404, 409, 422, 502, 503)
BODY_ERRORS = error_responses(413)


def jsonable(value: Any) -> Any:
    """Details may hold paths or other objects: anything JSON cannot carry becomes a string."""
    return json.loads(json.dumps(value, default=str, ensure_ascii=False))


def error_response(
    status: int, code: str, message: str, details: dict[str, Any] | None = None, **headers: str
) -> JSONResponse:
    body = {"code": code, "message": message, "details": jsonable(details or {})}
    return JSONResponse(body, status_code=status, headers=headers or None)


async def get_kb(request: Request) -> Knowledge:
    """The dependency every route uses to reach the facade (async: no threadpool hop)."""
    return request.app.state.kb


__all__ = [
    "BODY_ERRORS",
    "COMMON_ERRORS",
    "error_response",
    "error_responses",
    "get_kb",
    "jsonable",
]
