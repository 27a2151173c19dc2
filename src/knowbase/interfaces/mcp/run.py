"""Running the MCP server: stdio, streamable HTTP, and ``kb mcp`` (:func:`serve`)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from knowbase.interfaces.mcp import DEFAULT_HTTP_PORT, build_server
from knowbase.interfaces.mcp.scope import resolve_scope
from knowbase.service import Knowledge

log = logging.getLogger(__name__)
TOKEN_ENV = "KNOWBASE_API_TOKEN"  # the admin key, as for kb serve


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


def http_app(
    kb: Knowledge,
    *,
    base_ids: list[str] | None,
    allow_writes: bool,
    host: str = "127.0.0.1",
    allowed_hosts: tuple[str, ...] = (),
    path_roots: list[Path] | None = None,
    allowed_origins: tuple[str, ...] = (),
    admin_token: str | None = None,
) -> Any:
    """The streamable HTTP app at ``/mcp``, behind the Host/Origin guard and the key check.

    Host and Origin are checked by :mod:`.http_guard`, the rules ``kb serve`` uses (the SDK's
    own check is turned off rather than kept as a second, different copy); Origin on every
    request, as the SDK did, since an MCP session is state however it is reached. Keys are
    checked by :class:`~knowbase.interfaces.mcp.keys.KeyCheck` (``admin_token``:
    ``KNOWBASE_API_TOKEN``; with neither it nor a live key the server is open).
    """
    from mcp.server.transport_security import TransportSecuritySettings

    from knowbase.interfaces.http.guard import ALL_METHODS, HostGuard, HostPolicy
    from knowbase.interfaces.mcp.keys import KeyCheck

    server = build_server(kb, base_ids=base_ids, allow_writes=allow_writes, path_roots=path_roots)
    app = server.streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host=host,
    )
    checked = KeyCheck(app, kb, admin_token)
    policy = HostPolicy.for_bind(host, allowed_hosts, allowed_origins)
    return HostGuard(checked, policy, origin_methods=ALL_METHODS)


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
    admin_token: str | None = None,
) -> None:
    """Serve :func:`http_app` at ``http://host:port/mcp`` until interrupted."""
    import anyio
    import uvicorn

    from knowbase.interfaces.http.guard import is_loopback

    if not is_loopback(host) and not admin_token:
        log.warning("MCP over HTTP on %s without KNOWBASE_API_TOKEN: open unless keys exist", host)
    app = http_app(
        kb,
        base_ids=base_ids,
        allow_writes=allow_writes,
        host=host,
        allowed_hosts=allowed_hosts,
        path_roots=path_roots,
        allowed_origins=allowed_origins,
        admin_token=admin_token,
    )
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
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
    from knowbase.interfaces.mcp.paths import resolve_roots
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
                admin_token=os.environ.get(TOKEN_ENV) or None,
            )
        else:
            run_stdio(kb, base_ids=base_ids, allow_writes=allow_writes, path_roots=roots)
