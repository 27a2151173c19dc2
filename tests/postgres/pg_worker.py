"""A worker process on a PostgreSQL deployment: ``python pg_worker.py HOME DATABASE_URL``.

Prints ``ready`` once its workers run, then sleeps until killed (tests send SIGKILL).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from knowbase.service import Knowledge
from knowbase.settings import Settings


def main(home: str, url: str) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    kb = Knowledge(Settings(home=Path(home), database_url=url))
    kb.start_workers()
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
