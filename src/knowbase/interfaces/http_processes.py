"""Several API processes on one home (``kb serve --processes N``).

One Python process serves searches on one core at a time (the GIL); on a multi-core machine
the API scales by processes. uvicorn forks N processes that share the listening socket; each
imports :func:`app_from_env`, which opens its own ``Knowledge`` on the shared home (catalog
transactions, leases and file locks make that safe, as for ``kb worker``). Job workers run in
ONE separate ``kb worker`` process, so N API processes never mean N times the job concurrency.
That process runs ``worker_nice`` nicer (default 10): under search load an import gets the CPU
the API leaves instead of half of it (bench/http_load.py: searches during an import ran at
half the rate of those after it); on an idle machine it runs at full speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

CONFIG_ENV = "KNOWBASE_SERVE_CONFIG"


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
) -> None:
    """Run ``processes`` API processes (uvicorn's supervisor) plus, unless ``workers`` is
    False, one job-worker process ``worker_nice`` nicer; returns when uvicorn stops (Ctrl-C /
    SIGTERM)."""
    import uvicorn

    os.environ[CONFIG_ENV] = json.dumps({"home": home, **config})
    worker = None
    if workers:
        cmd = [sys.executable, "-m", "knowbase.interfaces.cli", "worker"]
        cmd += ["--nice", str(worker_nice)]
        if home:
            cmd += ["--home", home]
        worker = subprocess.Popen(cmd)
    try:
        uvicorn.run(
            "knowbase.interfaces.http_processes:app_from_env",
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


__all__ = ["CONFIG_ENV", "app_from_env", "serve_processes"]
