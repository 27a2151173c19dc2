"""A safe request that met a passing database fault is answered once more before it fails.

When SQLite reports a busy lock or an I/O error the catalog reopens its connections
(:meth:`knowbase.catalog.db.Catalog._fault`); a GET or HEAD is then run again, once, on the new
connections, and only a second failure reaches the client (issue 37: "the server reopens its
connections and retries once before it reports"). Writes are never repeated here: a write that
failed may have half-happened from the client's point of view, and its caller decides.

A pure ASGI wrapper: responses that are not a 503 pass through untouched, so streams (the event
feed) are not buffered.
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("knowbase.http")

#: The codes of faults a second try on fresh connections may not meet.
RETRIED_CODES = frozenset({"database_busy", "database_io_error"})
_SAFE_METHODS = frozenset({"GET", "HEAD"})

Message = dict[str, Any]


class RetryPassingFaults:
    """ASGI middleware: run a GET/HEAD again once when it answered 503 with a passing fault."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") not in _SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        held: list[Message] = []

        async def hold_a_503(message: Message) -> None:
            if held or (message["type"] == "http.response.start" and message["status"] == 503):
                held.append(message)
                return
            await send(message)

        await self.app(scope, receive, hold_a_503)
        if held and _code(held) in RETRIED_CODES:
            log.warning("%s %s met %s; retrying once", scope["method"], scope["path"], _code(held))
            await self.app(scope, receive, send)
            return
        for message in held:
            await send(message)


def _code(held: list[Message]) -> str | None:
    body = b"".join(m.get("body", b"") for m in held if m["type"] == "http.response.body")
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    return parsed.get("code") if isinstance(parsed, dict) else None


__all__ = ["RETRIED_CODES", "RetryPassingFaults"]
