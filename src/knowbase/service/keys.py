"""The API-key methods of ``Knowledge`` (``catalog/keys.py``, ``jobs/actor.py``): wiring only.

Keys are created and revoked from the CLI (``kb keys``); servers call :meth:`authenticate` on
every request. A catalog read costs ~0.5 ms on SQLite (measured here), a tenth of a search's
CPU budget, so what a token names and whether any key is live are remembered for
:data:`RECHECK_S`: a key created or revoked in another process counts within that second, one
created or revoked through this ``Knowledge`` at once.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from knowbase.catalog.models import OPEN, ApiKey, Principal
from knowbase.errors import Unauthorized

if TYPE_CHECKING:
    from knowbase.catalog.models import Base
    from knowbase.jobs.actor import Actor
    from knowbase.runtime import Runtime

ADMIN = "admin"
RECHECK_S = 1.0
#: One message for a missing, unknown, expired and revoked key: the answer tells nothing.
REFUSED = "a valid API key is required (Authorization: Bearer <key>)"


class KeysFacade:
    """Mixed into ``Knowledge``, which supplies ``rt`` and ``get_base``."""

    rt: Runtime

    def get_base(self, name_or_id: str) -> Base:
        raise NotImplementedError  # Knowledge's

    _key_memo: dict[str, tuple[float, ApiKey | None]]
    _live_memo: tuple[float, bool] | None = None

    def _now_ms(self) -> int:
        return int(self.rt.clock() * 1000)

    def _forget_keys(self) -> None:
        self._key_memo = {}
        self._live_memo = None

    def _find_key(self, token: str) -> ApiKey | None:
        from knowbase.catalog import keys

        memo = getattr(self, "_key_memo", None)
        if memo is None:
            memo = self._key_memo = {}
        hit = memo.get(token)
        if hit is not None and time.monotonic() - hit[0] < RECHECK_S:
            return hit[1]
        with self.rt.catalog.read() as conn:
            key = keys.find(conn, token)
        if len(memo) > 1000:  # many distinct tokens (a guessing client): start over
            memo.clear()
        memo[token] = (time.monotonic(), key)
        return key

    def _any_live_key(self) -> bool:
        from knowbase.catalog import keys

        memo = self._live_memo
        if memo is not None and time.monotonic() - memo[0] < RECHECK_S:
            return memo[1]
        with self.rt.catalog.read() as conn:
            live = keys.any_live(conn, self._now_ms())
        self._live_memo = (time.monotonic(), live)
        return live

    def create_key(
        self,
        name: str,
        *,
        write: bool,
        bases: Iterable[str] | None = None,
        expires_at_ms: int | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key and its token (shown once: only its hash is kept). ``bases``: names or
        ids (None: every base); each must exist now. ``write``: may change the bases it sees
        (add, delete, reindex, settings); else read only."""
        from knowbase.catalog import keys

        ids = None if bases is None else [self.get_base(b).id for b in bases]
        try:
            with self.rt.catalog.write_tx() as conn:
                return keys.create(
                    conn,
                    name,
                    access="write" if write else "read",
                    base_ids=ids,
                    expires_at=expires_at_ms,
                    now_ms=self._now_ms(),
                )
        finally:
            self._forget_keys()

    def list_keys(self) -> list[ApiKey]:
        """Every key (live, expired, revoked), by name; never a token."""
        from knowbase.catalog import keys

        with self.rt.catalog.read() as conn:
            return keys.list_keys(conn)

    def revoke_key(self, name: str) -> ApiKey:
        """Revoke the key at once (servers check keys on every request)."""
        from knowbase.catalog import keys

        try:
            with self.rt.catalog.write_tx() as conn:
                return keys.revoke(conn, name, now_ms=self._now_ms())
        finally:
            self._forget_keys()

    def key_state(self, key: ApiKey) -> str:
        """``active``, ``expired`` or ``revoked``, now."""
        return key.state(self._now_ms())

    def authenticate(self, token: str | None, *, admin_token: str | None) -> Principal:
        """Who a request with bearer ``token`` acts as; ``Unauthorized`` when it may not act.

        ``admin_token`` (``KNOWBASE_API_TOKEN``) is the admin. A key acts with its access and
        bases while it is neither expired nor revoked. Without a token, a server that has
        neither an admin token nor a live key is open (everyone is the admin, as before keys);
        otherwise a token is required.
        """
        if token:
            # Starlette decodes headers as latin-1: encoding back gives the bytes that were sent.
            given = token.encode("latin-1", "replace")
            # compare_digest: the time taken does not tell how much of the token was right.
            if admin_token and hmac.compare_digest(given, admin_token.encode("utf-8")):
                return Principal(ADMIN, "admin")
            key = self._find_key(token)
            if key is None or key.state(self._now_ms()) != "active":
                raise Unauthorized(REFUSED)
            ids = None if key.base_ids is None else frozenset(key.base_ids)
            return Principal(key.name, key.access, ids)
        if admin_token:
            raise Unauthorized(REFUSED)
        if self._any_live_key():
            raise Unauthorized(REFUSED)
        return OPEN

    def get_visible_base(self, name_or_id: str, principal: Principal) -> Base:
        """The base, when ``principal`` may see it; else the very ``NotFound`` an unknown base
        gets (a scoped key learns nothing of the other bases)."""
        from knowbase.catalog.bases import unknown_base

        base = self.get_base(name_or_id)
        if not principal.sees(base.id):
            raise unknown_base(name_or_id)
        return base

    def acting_as(self, key: str | None, surface: str) -> AbstractContextManager[Actor]:
        """Inside the block, every job enqueued records ``key`` and ``surface`` as who asked
        (``job.by_key``, ``job.by_surface``; ``kb jobs --by KEY``)."""
        from knowbase.jobs.actor import Actor, acting

        return acting(Actor(key, surface))

    def act_as(self, key: str | None, surface: str) -> None:
        """:meth:`acting_as` for the rest of the current context (a request's task)."""
        from knowbase.jobs.actor import Actor, act_as

        act_as(Actor(key, surface))


__all__ = ["ADMIN", "KeysFacade"]
