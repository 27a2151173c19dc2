"""Holders of a store: a close asked for while someone reads runs when the last one lets go.

The runtime caches one store per base and replaces it when the base changes (a model is
enabled, the base is restored). A search in another thread may be halfway through that store;
closing its connections under it would fail the search. So a store counts its holders — every
public call holds it for the call, and ``Runtime.lease`` for a whole operation — and ``close``
only marks it closing while anyone holds it; the last holder to leave closes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from knowbase.errors import VectorStoreUnavailable


class Leases:
    """A holder count with a deferred close. ``hold`` after the close has run raises."""

    def __init__(self, close_now: Callable[[], None], *, what: str) -> None:
        self._close_now = close_now
        self._what = what
        self._lock = threading.Lock()
        self._holders = 0
        self._closing = False
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def holders(self) -> int:
        return self._holders

    def acquire(self) -> None:
        with self._lock:
            if self._closed:
                raise VectorStoreUnavailable("the index store is closed", store=self._what)
            self._holders += 1

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            run = self._closing and self._holders == 0 and not self._closed
            if run:
                self._closed = True
        if run:
            self._close_now()

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Keep the store open for the body (re-entrant: holders are counted)."""
        self.acquire()
        try:
            yield
        finally:
            self.release()

    def close(self) -> bool:
        """Close now when nobody holds the store, else when the last holder leaves.

        Returns True when the close ran here. Idempotent.
        """
        with self._lock:
            if self._closed:
                return False
            self._closing = True
            if self._holders:
                return False
            self._closed = True
        self._close_now()
        return True
