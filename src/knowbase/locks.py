"""The keyed mutex: one holder per key (a base id) across threads and processes.

In a process, waiters are served in arrival order (a ticket handoff, not a free-for-all). With
``locks_dir`` set, the holder then also takes ``filelock.FileLock(locks_dir/<key>.lock)``, so
processes sharing a SQLite home exclude each other; the kernel frees that lock when a process
dies. On a PostgreSQL catalog (several hosts) ``cross_process=pg_advisory_lock(engine)`` takes
a session-level advisory lock on a dedicated connection instead; the server frees it when the
connection drops. Take the lock, then open transactions, never the reverse; never hold it
while cancelling jobs, fetching, reading, OCR-ing or embedding.

    mutex = KeyedMutex(home / "locks")
    with mutex.hold(base_id):
        ...
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from knowbase.errors import InvalidInput

_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


@dataclass
class _Slot:
    owner: int  # thread ident of the holder
    waiters: deque[tuple[int, threading.Event]] = field(default_factory=deque)


class KeyedMutex:
    """Exclusive per key, FIFO within a process; cross-process when ``locks_dir`` is set.

    Not re-entrant: ``hold(k)`` inside ``hold(k)`` on the same thread raises ``RuntimeError``
    instead of deadlocking.
    """

    def __init__(
        self,
        locks_dir: Path | None = None,
        *,
        cross_process: Callable[[str], AbstractContextManager[object]] | None = None,
    ) -> None:
        self.locks_dir = None if locks_dir is None else Path(locks_dir)
        self.cross_process = cross_process
        if self.locks_dir is not None:
            self.locks_dir.mkdir(parents=True, exist_ok=True)
        self._guard = threading.Lock()
        self._slots: dict[str, _Slot] = {}

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        """Hold ``key`` for the ``with`` block."""
        if not _KEY.fullmatch(key):
            raise InvalidInput(f"lock key {key!r} is not a safe file name", key=key)
        self._acquire(key)
        try:
            file_lock = None
            if self.locks_dir is not None:
                # Lock files are never deleted: unlinking one while another process waits on
                # it would let a third process lock a fresh inode at the same path.
                file_lock = FileLock(self.locks_dir / f"{key}.lock", thread_local=False)
                file_lock.acquire()
            try:
                if self.cross_process is not None:
                    with self.cross_process(key):
                        yield
                else:
                    yield
            finally:
                if file_lock is not None:
                    file_lock.release()
        finally:
            self._release(key)

    def held_by_current_thread(self, key: str) -> bool:
        with self._guard:
            slot = self._slots.get(key)
            return slot is not None and slot.owner == threading.get_ident()

    def _acquire(self, key: str) -> None:
        me = threading.get_ident()
        with self._guard:
            slot = self._slots.get(key)
            if slot is None:
                self._slots[key] = _Slot(owner=me)
                return
            if slot.owner == me:
                raise RuntimeError(f"lock {key!r} is already held by this thread (not re-entrant)")
            event = threading.Event()
            slot.waiters.append((me, event))
        # The releaser hands the slot straight to the first waiter (sets owner, then event):
        # nobody can barge in between, which is what makes the order FIFO.
        event.wait()

    def _release(self, key: str) -> None:
        with self._guard:
            slot = self._slots[key]
            if slot.waiters:
                owner, event = slot.waiters.popleft()
                slot.owner = owner
                event.set()
            else:
                del self._slots[key]


__all__ = ["KeyedMutex"]


def pg_advisory_lock(engine: Any) -> Callable[[str], AbstractContextManager[object]]:
    """A ``cross_process`` lock for PostgreSQL catalogs: ``pg_advisory_lock`` per key."""
    import hashlib

    import sqlalchemy as sa

    @contextmanager
    def hold(key: str) -> Iterator[None]:
        lock_id = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big", signed=True)
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": lock_id})
            conn.commit()  # session-level: the lock outlives this tx, the connection holds it
            try:
                yield
            finally:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": lock_id})
                conn.commit()

    return hold
