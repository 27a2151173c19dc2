"""Host and Origin checks for an HTTP server on this machine (``kb serve``, ``kb mcp --http``).

Any web page the user opens can send requests to a loopback server. Two checks keep it out:

- **Host** (DNS rebinding): a page on ``evil.example`` whose name is re-pointed at 127.0.0.1
  sends ``Host: evil.example``. Only the names the server answers to are served, else 421:
  the bound address, the loopback names (``localhost``, ``127.0.0.1``, ``[::1]``) when bound to
  loopback, and the configured ``allowed_hosts``. A Host that names one of the server's own
  names with a port names that port: ``localhost:1`` on a server listening on 8765 is meant
  for another server and refused like a foreign name (issue 37); a configured name may carry
  any port (a proxy in front listens where it likes). A wildcard bind (``0.0.0.0``, ``::``) needs a
  bearer token (``kb serve`` refuses it otherwise), which no foreign page can send, so it
  accepts any Host unless ``allowed_hosts`` is configured. ``*`` in ``allowed_hosts`` turns the
  check off (a proxy that rewrites Host).
- **Origin** (cross-site writes): a page may POST a form or an upload to any address without
  reading the answer, so a state-changing request (POST, PUT, PATCH, DELETE) that carries an
  ``Origin`` is refused 403 unless that origin is this server's own -- scheme, host AND port
  equal to the request's scheme and ``Host`` (the browser sets Host to the server it talks to)
  -- or one of the configured ``allowed_origins``. No Origin (curl, SDKs, the CLI) is allowed:
  browsers always send one on such requests.

Ports are compared: every other program on this machine (a dev server on localhost:3000, a
page some tool serves on 127.0.0.1:9999) is another origin, and trusting "any port of a
loopback name" let any of them create bases and upload (issue 26). A console behind a proxy,
or a browser tool such as the MCP Inspector, is added with ``allowed_origins``
(``KNOWBASE_ALLOWED_ORIGINS``, full origins like ``http://localhost:6274``; ``*`` turns the
check off). The checks are pure functions of plain data; :class:`HostGuard` applies them to
every HTTP request of an ASGI app, before routing, auth and body parsing.

    guard = HostPolicy.for_bind("127.0.0.1", ["kb.example"], ["http://localhost:6274"])
    app = HostGuard(app, guard)
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:  # `kb --help` imports this module (is_loopback): no web stack at runtime
    from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger(__name__)

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
DEFAULT_PORTS = {"http": 80, "https": 443}
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ALL_METHODS = None  # HostGuard(origin_methods=ALL_METHODS): check Origin on every request
HOST_REFUSED = (421, "host_not_allowed")
ORIGIN_REFUSED = (403, "origin_not_allowed")


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP; a name or wildcard (``0.0.0.0``, ``::``) is not."""
    if host.strip().lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """``0.0.0.0``, ``::`` or an empty host: every address of the machine."""
    text = host.strip().strip("[]")
    if not text:
        return True
    try:
        return ipaddress.ip_address(text).is_unspecified
    except ValueError:
        return False


def normalise_host(host: str) -> str | None:
    """A host as it is compared: lower case, no trailing dot, IPv6 in brackets, no port.

    ``Host`` headers (``Example.COM:8765``, ``[::1]:80``) and bare names or addresses (``::1``)
    alike; None when it is not a host at all.

    >>> normalise_host("[::1]:8765"), normalise_host("LocalHost.:80"), normalise_host("::1")
    ('[::1]', 'localhost', '[::1]')
    """
    text = host.strip().lower()
    if not text or any(c.isspace() or c in "/\\@?#" for c in text):
        return None
    if ":" in text and "[" not in text and "]" not in text:
        try:  # a bare IPv6 address (a bind host, a configured name)
            return f"[{ipaddress.IPv6Address(text)}]"
        except ValueError:
            pass
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        try:
            return f"[{ipaddress.IPv6Address(inside)}]"
        except ValueError:
            return None
    name, colon, port = text.partition(":")
    if colon and not port.isdigit():
        return None
    name = name.rstrip(".")
    return name or None


Origin = tuple[str, str, int]
"""``(scheme, normalised host, port)``: what browsers compare, the default port filled in."""


def parse_origin(origin: str) -> Origin | None:
    """An ``http(s)://host[:port]`` origin as compared; None for ``null``, paths, userinfo…

    >>> parse_origin("HTTP://LocalHost:8765"), parse_origin("https://kb.example")
    (('http', 'localhost', 8765), ('https', 'kb.example', 443))
    """
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.netloc:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        return None
    return _authority(parts.scheme, parts.netloc)


def host_port(host_header: str) -> int | None:
    """The port a ``Host`` header names, None when it names none.

    >>> host_port("[::1]:8765"), host_port("localhost"), host_port("localhost:1")
    (8765, None, 1)
    """
    _, bracket, after = host_header.strip().rpartition("]")
    tail = after if bracket else host_header.strip()
    _, colon, port = tail.rpartition(":")
    return int(port) if colon and port.isdigit() else None


def _authority(scheme: str, netloc: str) -> Origin | None:
    """``(scheme, host, port)`` of a ``host[:port]`` authority (a Host header, an origin's)."""
    name = normalise_host(netloc)
    if name is None:
        return None
    port = host_port(netloc)
    return scheme, name, (DEFAULT_PORTS.get(scheme, 80) if port is None else port)


@dataclass(frozen=True)
class HostPolicy:
    """The host names a server answers to (normalised); ``any_host``: every Host is served.
    ``origins``: the configured origins besides the server's own that may change state;
    ``any_origin``: every origin may (``allowed_origins = ["*"]``)."""

    names: frozenset[str]
    any_host: bool = False
    origins: frozenset[Origin] = frozenset()
    any_origin: bool = False
    configured: frozenset[str] = frozenset()  # the allowed_hosts names: any port

    @classmethod
    def for_bind(
        cls, bind_host: str, allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = ()
    ) -> HostPolicy:
        """The policy of a server bound to ``bind_host`` with the configured ``allowed_hosts``
        and ``allowed_origins``. An origin that cannot be parsed is logged and ignored.

        >>> sorted(HostPolicy.for_bind("127.0.0.1", ["kb.example"]).names)
        ['127.0.0.1', '[::1]', 'kb.example', 'localhost']
        """
        origins, any_origin = _configured_origins(allowed_origins)
        configured = [h for h in (a.strip() for a in allowed_hosts) if h]
        if "*" in configured:
            return cls(frozenset(), True, origins, any_origin)
        names = {n for n in map(normalise_host, configured) if n}
        mine = frozenset(names)
        if is_wildcard(bind_host):
            everything = frozenset(names | set(LOOPBACK_NAMES))
            return cls(everything, not names, origins, any_origin, mine)
        bound = normalise_host(bind_host)
        if bound:
            names.add(bound)
        if is_loopback(bind_host):
            names.update(LOOPBACK_NAMES)
        return cls(frozenset(names), False, origins, any_origin, mine)

    def host_allowed(self, host_header: str | None, server_port: int | None = None) -> bool:
        """Whether a request with this ``Host`` header is served (a missing one is not).

        ``server_port``: the port the request came in on (ASGI ``scope["server"]``); a Host
        naming one of the server's own names with another port is refused. None: ports are
        not compared.

        >>> HostPolicy.for_bind("127.0.0.1").host_allowed("localhost:1", 8765)
        False
        """
        if self.any_host:
            return True
        name = normalise_host(host_header or "")
        if name is None or name not in self.names:
            return False
        if server_port is None or name in self.configured:
            return True
        port = host_port(host_header or "")
        return port is None or port == server_port

    def origin_allowed(
        self, origin: str | None, host_header: str | None, scheme: str = "http"
    ) -> bool:
        """Whether a request carrying ``Origin: origin`` may change state.

        Allowed: no Origin; this server's own origin -- the request's ``scheme`` and ``Host``
        (scheme, host and port all equal, a missing port read as the scheme's default); a
        configured origin. ``null`` (sandboxed frames, files), another port of the same host
        and anything else are refused.
        """
        if origin is None or self.any_origin:
            return True
        theirs = parse_origin(origin)
        if theirs is None:
            return False
        if theirs in self.origins:
            return True
        own = _authority(scheme, host_header) if host_header else None
        return own is not None and own == theirs

    def refusal(
        self,
        method: str,
        headers: Mapping[str, str],
        *,
        origin_methods: frozenset[str] | None = STATE_CHANGING,
        scheme: str = "http",
        server_port: int | None = None,
    ) -> tuple[int, str, str] | None:
        """``(status, code, message)`` when the request must be refused, else None.

        ``headers``: lower-case names. ``origin_methods``: the methods whose Origin is checked
        (None: every method). ``scheme``: the request's own (ASGI ``scope["scheme"]``).
        ``server_port``: the port it came in on (:meth:`host_allowed`).
        """
        host = headers.get("host")
        if not self.host_allowed(host, server_port):
            status, code = HOST_REFUSED
            return status, code, f"this server does not answer to Host {host!r}"
        if origin_methods is None or method.upper() in origin_methods:
            origin = headers.get("origin")
            if not self.origin_allowed(origin, host, scheme):
                status, code = ORIGIN_REFUSED
                return (
                    status,
                    code,
                    f"requests from origin {origin!r} may not change anything: only this"
                    " server's own origin may (add it to allowed_origins or"
                    " KNOWBASE_ALLOWED_ORIGINS to trust it)",
                )
        return None


class HostGuard:
    """ASGI middleware: refuse what :meth:`HostPolicy.refusal` refuses, with the error shape
    ``{code, message, details}``; everything else (and non-HTTP scopes) passes through."""

    def __init__(
        self,
        app: ASGIApp,
        policy: HostPolicy,
        *,
        origin_methods: frozenset[str] | None = STATE_CHANGING,
    ) -> None:
        self.app, self.policy, self.origin_methods = app, policy, origin_methods

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            # Header bytes are latin-1 on the wire (Starlette decodes them the same way); a
            # repeated header keeps its first value, as Starlette's Headers.get does.
            headers: dict[str, str] = {}
            for name, value in scope.get("headers", ()):
                headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
            server = scope.get("server")  # (host, port) of the listening socket; None or a path
            port = server[1] if server and isinstance(server[1], int) else None
            refused = self.policy.refusal(
                scope.get("method", "GET"),
                headers,
                origin_methods=self.origin_methods,
                scheme=scope.get("scheme") or "http",
                server_port=port,
            )
            if refused is not None:
                status, code, message = refused
                log.warning("refused %s %s: %s", scope.get("method"), scope.get("path"), message)
                await _send_error(send, status, code, message, headers)
                return
        await self.app(scope, receive, send)


def _configured_origins(allowed: Iterable[str]) -> tuple[frozenset[Origin], bool]:
    origins: set[Origin] = set()
    for text in (a.strip() for a in allowed):
        if text == "*":
            return frozenset(), True
        parsed = parse_origin(text) if text else None
        if parsed is None:
            if text:
                log.warning("allowed_origins: %r is not an http(s) origin; ignored", text)
            continue
        origins.add(parsed)
    return frozenset(origins), False


async def _send_error(
    send: Send, status: int, code: str, message: str, headers: Mapping[str, str]
) -> None:
    details = {k: headers[k] for k in ("host", "origin") if k in headers}
    body = json.dumps({"code": code, "message": message, "details": details}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


__all__ = [
    "ALL_METHODS",
    "LOOPBACK_NAMES",
    "STATE_CHANGING",
    "HostGuard",
    "HostPolicy",
    "is_loopback",
    "is_wildcard",
    "normalise_host",
    "parse_origin",
]
