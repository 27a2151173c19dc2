"""The keyed mutex across hosts on a PostgreSQL catalog: session advisory locks."""

from __future__ import annotations

import threading
import time

import sqlalchemy as sa

from knowbase.locks import KeyedMutex, pg_advisory_lock


def test_two_hosts_exclude_each_other(pg_url):
    # Two mutexes with their own engines stand for two hosts sharing one catalog.
    engines = [sa.create_engine(pg_url), sa.create_engine(pg_url)]
    a, b = (KeyedMutex(cross_process=pg_advisory_lock(e)) for e in engines)
    events: list[str] = []
    held = threading.Event()

    def host_b() -> None:
        held.wait(5)
        with b.hold("base-1"):
            events.append("b-in")

    t = threading.Thread(target=host_b)
    t.start()
    with a.hold("base-1"):
        held.set()
        time.sleep(0.3)  # host B must be waiting now, not inside
        events.append("a-out")
    t.join(5)
    assert events == ["a-out", "b-in"]
    with a.hold("base-2"), b.hold("base-3"):  # other keys are independent
        pass
    for e in engines:
        e.dispose()
