"""Several API processes on one home (``kb serve --processes N``).

One Python process serves searches on one core at a time (the GIL); on a multi-core machine
the API scales by processes. Each of N processes runs uvicorn on :func:`app_from_env`, which
opens its own ``Knowledge`` on the shared home (catalog transactions, leases and file locks
make that safe, as for ``kb worker``). Job workers run in ONE separate ``kb worker`` process,
so N API processes never mean N times the job concurrency.

Each API process listens on its own ``SO_REUSEPORT`` socket, so the kernel spreads connections
over them by address hash. With one shared socket (uvicorn's ``workers=N``) whichever process
woke first accepted every pending connection: the bench's 50 keep-alive clients split 35/15
and the larger share waited 2.5x as long. Where ``SO_REUSEPORT`` is missing, uvicorn's
supervisor runs instead.

The job-worker process runs ``worker_nice`` nicer (default 10): under search load an import
gets the CPU the API leaves instead of half of it (bench/http_load.py: searches during an
import ran at half the rate of those after it); on an idle machine it runs at full speed.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

CONFIG_ENV = "KNOWBASE_SERVE_CONFIG"
log = logging.getLogger(__name__)


def app_from_env() -> Any:
    """The app of one API process, built from the JSON that ``kb serve`` left in the env."""
    from fastapi import FastAPI

    from knowbase.interfaces.http import create_app
    from knowbase.service import Knowledge
    from knowbase.settings import load_settings

    cfg = json.loads(os.environ[CONFIG_ENV])
    kb = Knowledge(load_settings(cfg["home"]))
    app = create_app(
        kb,
        token=cfg["token"],
        require_token=cfg["require_token"],
        max_upload_bytes=cfg["max_upload_bytes"],
        local_path_roots=[Path(p) for p in cfg["roots"]],
        host=cfg["host"],
        allowed_hosts=kb.settings.allowed_hosts,
        allowed_origins=kb.settings.allowed_origins,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            kb.close()

    app.router.lifespan_context = lifespan
    return app


def serve_processes(
    *,
    home: str | None,
    host: str,
    port: int,
    processes: int,
    workers: bool,
    config: dict[str, Any],
    worker_nice: int = 0,
    watch: bool = False,
) -> None:
    """Run ``processes`` API processes plus, unless ``workers`` is False, one job-worker
    process ``worker_nice`` nicer (which also watches the origins with ``watch``); returns
    when the API processes stop (Ctrl-C / SIGTERM)."""
    import uvicorn

    os.environ[CONFIG_ENV] = json.dumps({"home": home, **config})
    worker = None
    if workers:
        cmd = [sys.executable, "-m", "knowbase.interfaces.cli", "worker"]
        cmd += ["--nice", str(worker_nice)]
        if watch:
            cmd.append("--watch")
        if home:
            cmd += ["--home", home]
        worker = subprocess.Popen(cmd)
    try:
        if hasattr(socket, "SO_REUSEPORT"):
            _supervise_api_processes(host, port, processes)
        else:
            uvicorn.run(
                "knowbase.interfaces.http.processes:app_from_env",
                factory=True,
                host=host,
                port=port,
                workers=processes,
                log_level="warning",
            )
    finally:
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()


def _reuseport_socket(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    return sock


def _api_process(host: str, port: int) -> None:
    """One API process: its own listening socket in the port's reuse group, one uvicorn."""
    import uvicorn

    sock = _reuseport_socket(host, port)
    config = uvicorn.Config(
        "knowbase.interfaces.http.processes:app_from_env", factory=True, log_level="warning"
    )
    uvicorn.Server(config).run(sockets=[sock])


def _supervise_api_processes(host: str, port: int, processes: int) -> None:
    """Start ``processes`` API processes on ``host:port``, restart any that dies, stop them all
    on SIGTERM / SIGINT. The port is held (bound, not listening) here for the whole run, so
    ``port=0`` picks one port that every process then joins."""
    held = _reuseport_socket(host, port)
    port = held.getsockname()[1]
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    ctx = multiprocessing.get_context("spawn")

    def start() -> multiprocessing.process.BaseProcess:
        proc = ctx.Process(target=_api_process, args=(host, port), name="knowbase-api")
        proc.start()
        return proc

    procs = [start() for _ in range(processes)]
    try:
        while not stop.wait(0.5):
            for n, proc in enumerate(procs):
                if not proc.is_alive() and not stop.is_set():
                    log.warning("API process %s exited with %s; starting another", proc.pid,
                                proc.exitcode)  # fmt: skip
                    procs[n] = start()
    finally:
        for proc in procs:
            proc.terminate()  # uvicorn shuts down gracefully on SIGTERM
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join()
        held.close()


__all__ = ["CONFIG_ENV", "app_from_env", "serve_processes"]
