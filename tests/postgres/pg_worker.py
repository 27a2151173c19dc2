"""A worker process on a PostgreSQL deployment: ``python pg_worker.py HOME URL [THREADS]``.

Prints ``ready`` once its workers run, then sleeps until killed (tests send SIGKILL).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from knowbase.service import Knowledge
from knowbase.settings import Settings


def main(home: str, url: str, threads: str | None = None) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    kb = Knowledge(Settings(home=Path(home), database_url=url, test_providers=True))
    kb.start_workers(threads=int(threads) if threads else None)
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(*sys.argv[1:4])
