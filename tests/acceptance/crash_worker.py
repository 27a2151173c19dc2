"""A standalone worker process for the crash tests: ``python crash_worker.py HOME``.

Opens ``Knowledge`` over HOME, starts its workers, prints ``ready`` and then sleeps until it is
killed (the tests send SIGKILL, so nothing here gets to clean up — that is the point).
"""

from __future__ import annotations

import logging
import sys
import time

from knowbase.service import Knowledge
from knowbase.settings import load_settings


def main(home: str) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    kb = Knowledge(load_settings(home))
    kb.start_workers()
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1])
