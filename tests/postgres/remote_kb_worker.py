"""``kb worker`` as if it ran on another machine: ``python remote_kb_worker.py HOST LEASE_S
worker [kb options]``.

Its worker id names ``HOST``, so workers on this host cannot see its pid die: only its lease
lapsing lets them recover its jobs, as between real machines. ``LEASE_S`` shortens the lease
(heartbeat a quarter of it) so a test need not wait the default 30 s. Everything else is the
real CLI.
"""

from __future__ import annotations

import sys

from knowbase.jobs import liveness
from knowbase.jobs.manager import JobManager


def main() -> None:
    host, lease_s = sys.argv[1], float(sys.argv[2])
    liveness.this_host.cache_clear()
    liveness.this_host = lambda: host  # type: ignore[assignment]  # make_worker_id reads it
    defaults = JobManager.__init__.__kwdefaults__
    defaults.update(lease_s=lease_s, heartbeat_s=lease_s / 4)
    from knowbase.interfaces.cli import main as kb

    sys.argv = ["kb", *sys.argv[3:]]
    kb()


if __name__ == "__main__":
    main()
