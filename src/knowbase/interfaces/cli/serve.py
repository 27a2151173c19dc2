"""``kb serve``: the HTTP API and the job workers in one process.

Binds 127.0.0.1 unless told otherwise; any other address needs ``KNOWBASE_API_TOKEN`` (clients
send ``Authorization: Bearer <token>``). With the token set, loopback requires it too. Requests
naming another ``Host`` are refused 421 and state-changing ones from a foreign ``Origin`` 403
(:mod:`.http_guard`); more names go in ``allowed_hosts`` (config.toml) or
``KNOWBASE_ALLOWED_HOSTS``. FastAPI and uvicorn are imported only when the command runs, so
``kb --help`` stays light.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from knowbase.service import Knowledge

TOKEN_ENV = "KNOWBASE_API_TOKEN"
PATH_ROOTS_ENV = "KNOWBASE_HTTP_PATH_ROOTS"
LOG_FILE_ENV = "KNOWBASE_LOG_FILE"
LOG_LEVELS = ("debug", "info", "warning", "error")


def is_loopback(host: str) -> bool:
    """:func:`knowbase.interfaces.http.guard.is_loopback`, imported when called: the ``http``
    package's face is the FastAPI app, and ``kb --help`` must not load FastAPI."""
    from knowbase.interfaces.http.guard import is_loopback as check

    return check(host)


def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback bind without a token (``kb serve`` exits 2 with the reason)."""
    if not is_loopback(host) and not token:
        raise typer.BadParameter(
            f"binding {host} exposes the API beyond this machine: set {TOKEN_ENV} "
            "(clients then send 'Authorization: Bearer <token>')",
            param_hint="--host",
        )


def serve(
    home: Annotated[
        str | None,
        typer.Option("--home", envvar="KNOWBASE_HOME", help="Home directory (env KNOWBASE_HOME)."),
    ] = None,
    host: Annotated[
        str, typer.Option(help=f"Address to bind; non-loopback needs {TOKEN_ENV}.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port.")] = 8765,
    no_workers: Annotated[
        bool, typer.Option("--no-workers", help="Serve only; run jobs in a separate kb worker.")
    ] = False,
    allow_path: Annotated[
        list[Path] | None,
        typer.Option(
            "--allow-path",
            help=f"Directory whose files may be added by local path (repeatable; env "
            f"{PATH_ROOTS_ENV}, {os.pathsep}-separated). Uploads work without it.",
        ),
    ] = None,
    max_upload_mb: Annotated[
        int, typer.Option(min=1, help="Largest request body accepted, in MiB.")
    ] = 100,
    processes: Annotated[
        int,
        typer.Option(
            min=1,
            max=64,
            help="API processes sharing the port (one per core scales search); with more "
            "than one, the job workers run in one extra process.",
        ),
    ] = 1,
    worker_nice: Annotated[
        int,
        typer.Option(
            min=0,
            max=19,
            help="With --processes > 1: the job-worker process runs this much nicer, so "
            "imports use the CPU that searches leave (0: equal priority).",
        ),
    ] = 10,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="Keep every base's folders and files current: sync a base when its origins "
            "change (as kb sync --watch; deletes only where the base sets sync_deletes).",
        ),
    ] = False,
    log_file: Annotated[
        Path | None,
        typer.Option(
            "--log-file",
            envvar=LOG_FILE_ENV,
            help="Write the log here instead of stderr, rotated at 10 MiB with 3 older files"
            " kept. One process only (not with --processes).",
        ),
    ] = None,
    log_level: Annotated[
        str,
        typer.Option(
            "--log-level", help="Least severe log lines written: debug, info, warning, error."
        ),
    ] = "warning",
) -> None:
    """Run the HTTP API (OpenAPI at /docs) and, unless --no-workers, the job workers.

    Log lines carry their time; an error that repeats is written once with its traceback,
    then once a minute as "same error ×N in the last minute" (interfaces/logs.py)."""
    token = os.environ.get(TOKEN_ENV) or None
    check_bind(host, token)
    _refuse_bad_options(log_level, log_file, processes, watch=watch, no_workers=no_workers)
    from knowbase.interfaces.logs import configure

    configure(log_level.lower(), log_file)
    roots = list(allow_path or [])
    if not roots and os.environ.get(PATH_ROOTS_ENV):
        roots = [Path(p) for p in os.environ[PATH_ROOTS_ENV].split(os.pathsep) if p]
    listen = _Listen(host, port, token, max_upload_mb * 1024 * 1024, roots)
    if processes > 1:
        _serve_processes(listen, home, processes, no_workers, worker_nice, watch)
    else:
        _serve_here(listen, home, no_workers, watch, log_level.lower())


def _refuse_bad_options(
    log_level: str, log_file: Path | None, processes: int, *, watch: bool, no_workers: bool
) -> None:
    if log_level.lower() not in LOG_LEVELS:
        raise typer.BadParameter(f"one of {', '.join(LOG_LEVELS)}", param_hint="--log-level")
    if log_file is not None and processes > 1:
        # N processes rotating one file each on their own would lose and interleave lines.
        raise typer.BadParameter(
            "--log-file needs one process; with --processes redirect stderr instead",
            param_hint="--log-file",
        )
    if watch and no_workers:
        raise typer.BadParameter(
            "--watch syncs through this process's job workers; with --no-workers run "
            "'kb worker --watch' beside the server instead",
            param_hint="--watch",
        )


@dataclass(frozen=True)
class _Listen:
    """Where and how the API listens: address, admin token, body limit, local-path roots."""

    host: str
    port: int
    token: str | None
    max_upload_bytes: int
    roots: list[Path]

    def banner(self, detail: str, tail: str = "") -> str:
        address = _address(self.host, self.port)
        auth = "bearer token" if self.token else "off"
        return f"knowbase console: {address}/  (API: {address}/docs){detail}; auth {auth}{tail}"


def _serve_processes(
    listen: _Listen, home: str | None, processes: int, no_workers: bool, nice: int, watch: bool
) -> None:
    from knowbase.interfaces.http.processes import serve_processes

    workers = "off" if no_workers else "in one more process"
    typer.echo(listen.banner(f", {processes} processes; workers {workers}"), err=True)
    config = {
        "host": listen.host,
        "token": listen.token,
        "require_token": not is_loopback(listen.host),
        "max_upload_bytes": listen.max_upload_bytes,
        "roots": [str(r) for r in listen.roots],
    }
    serve_processes(
        home=home,
        host=listen.host,
        port=listen.port,
        processes=processes,
        workers=not no_workers,
        worker_nice=nice,
        config=config,
        watch=watch,
    )


def _serve_here(
    listen: _Listen, home: str | None, no_workers: bool, watch: bool, log_level: str
) -> None:
    import uvicorn

    from knowbase.interfaces.http import create_app
    from knowbase.service import Knowledge
    from knowbase.settings import load_settings

    with Knowledge(load_settings(home)) as kb:
        if not no_workers:
            kb.start_workers()
        app = create_app(
            kb,
            token=listen.token,
            require_token=not is_loopback(listen.host),
            max_upload_bytes=listen.max_upload_bytes,
            local_path_roots=listen.roots,
            host=listen.host,
            allowed_hosts=kb.settings.allowed_hosts,
            allowed_origins=kb.settings.allowed_origins,
        )
        workers = "off" if no_workers or kb.catalog_problem else "on"
        watching_note = "; watching origins" if watch else ""
        typer.echo(listen.banner(f"; workers {workers}", watching_note), err=True)
        with watching(kb, enabled=watch), sigterm_exits():
            # log_config=None: uvicorn's records go through the handler configured above
            # (timestamps, repeats collapsed, the file) instead of its own stderr handlers.
            uvicorn.run(
                app, host=listen.host, port=listen.port, log_level=log_level, log_config=None
            )


@contextlib.contextmanager
def sigterm_exits() -> Iterator[None]:
    """SIGTERM ends the process as Ctrl-C does: by an exception, so every ``with`` on the way
    out runs (the workers stop and hand their jobs back, the log's held counts are written).

    uvicorn shuts down gracefully on SIGTERM, then raises the signal again under the handler
    that was there before it; with the default one the process died right there, skipping
    all of that."""
    import signal

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)  # a stop that was asked for

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _address(host: str, port: int) -> str:
    """The URL a browser opens (an IPv6 address in brackets; 0.0.0.0 reached as localhost)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


@contextlib.contextmanager
def watching(kb: Knowledge, *, enabled: bool) -> Iterator[None]:
    """Run the origin watcher of every base in a thread beside the caller (the workers are
    already running); stop it on the way out."""
    if not enabled:
        yield
        return
    from knowbase.interfaces.watch import watch_bases

    stop = threading.Event()
    thread = threading.Thread(
        target=watch_bases,
        args=(kb, None),
        kwargs={"stop": stop, "run_workers": False},
        name="kb-watch",
        daemon=True,
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


def register(app: typer.Typer) -> None:
    """Add ``kb serve`` to the main CLI."""
    app.command("serve")(serve)


__all__ = ["check_bind", "is_loopback", "register", "serve"]
