"""Scoped API keys in the catalog (``api_key``, migration 0008k): create, list, revoke, look up.

A key is a random token shown once; the catalog keeps its SHA-256 only, so a copy of the
catalog gives no one a working key. A key has an access (``read`` or ``write``), the bases it
may see (ids; None: every base) and an optional expiry. A revoked key keeps its row: its name
stays in the jobs it asked for, and is never given to another key.

A token is 32 random bytes (``secrets.token_urlsafe``) behind a ``kb_`` prefix, so a key is
recognisable in a leaked log. SHA-256 without salt or stretching is enough for such tokens:
stretching protects guessable passwords, and 256 random bits are not guessable.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog.models import ApiKey
from knowbase.catalog.schema import KEY_ACCESS
from knowbase.catalog.schema import api_key as key_t
from knowbase.errors import InvalidInput, KeyExists, NotFound

TOKEN_PREFIX = "kb_"
#: ``admin`` is the name ``KNOWBASE_API_TOKEN`` acts under: no key may take it.
RESERVED_NAMES = frozenset({"admin"})
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def token_hash(token: str) -> str:
    """The stored form of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def create(
    conn: Connection,
    name: str,
    *,
    access: str,
    base_ids: list[str] | None,
    expires_at: int | None,
    now_ms: int,
) -> tuple[ApiKey, str]:
    """Insert a key; the key and its token (the only time the token exists outside the
    caller's hands). Raises ``InvalidInput`` for a bad name or access, ``KeyExists``."""
    if not NAME_RE.match(name) or name.lower() in RESERVED_NAMES:
        raise InvalidInput(
            f"{name!r} is not a usable key name: letters, digits, '.', '_', '-' (at most 64),"
            " and not 'admin'",
            name=name,
        )
    if access not in KEY_ACCESS:
        raise InvalidInput(f"access must be one of {', '.join(KEY_ACCESS)}", access=access)
    if expires_at is not None and expires_at <= now_ms:
        raise InvalidInput("the expiry is in the past", expires_at=expires_at)
    if conn.execute(sa.select(key_t.c.name).where(key_t.c.name == name)).first() is not None:
        raise KeyExists(f"an API key named {name!r} exists already", name=name)
    token = new_token()
    ids = None if base_ids is None else list(dict.fromkeys(base_ids))
    values = {
        "name": name,
        "token_sha256": token_hash(token),
        "access": access,
        "base_ids": None if ids is None else json.dumps(ids),
        "created_at": now_ms,
        "expires_at": expires_at,
        "revoked_at": None,
    }
    conn.execute(sa.insert(key_t).values(values))
    return ApiKey.from_row(_row(conn, name)), token


def _row(conn: Connection, name: str) -> Any:
    return conn.execute(sa.select(key_t).where(key_t.c.name == name)).first()


def list_keys(conn: Connection) -> list[ApiKey]:
    """Every key, live or not, by name."""
    return [ApiKey.from_row(r) for r in conn.execute(sa.select(key_t).order_by(key_t.c.name))]


def revoke(conn: Connection, name: str, *, now_ms: int) -> ApiKey:
    """Mark the key revoked (already revoked: unchanged). ``NotFound`` for an unknown name."""
    row = _row(conn, name)
    if row is None:
        raise NotFound(f"no API key named {name!r}", name=name)
    if row.revoked_at is None:
        conn.execute(sa.update(key_t).where(key_t.c.name == name).values(revoked_at=now_ms))
        row = _row(conn, name)
    return ApiKey.from_row(row)


def find(conn: Connection, token: str) -> ApiKey | None:
    """The key whose token this is, whatever its state; None for an unknown token."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    row = conn.execute(sa.select(key_t).where(key_t.c.token_sha256 == token_hash(token))).first()
    return None if row is None else ApiKey.from_row(row)


def any_live(conn: Connection, now_ms: int) -> bool:
    """Whether some key is neither revoked nor expired: a server then asks every request
    for a key (one index-free scan of a table of a few rows)."""
    q = (
        sa.select(key_t.c.name)
        .where(key_t.c.revoked_at.is_(None))
        .where(sa.or_(key_t.c.expires_at.is_(None), key_t.c.expires_at > now_ms))
        .limit(1)
    )
    return conn.execute(q).first() is not None


__all__ = [
    "TOKEN_PREFIX",
    "ApiKey",
    "any_live",
    "create",
    "find",
    "list_keys",
    "new_token",
    "revoke",
    "token_hash",
]
