"""API keys in the catalog (``catalog/keys.py``), on SQLite and PostgreSQL: only a hash is
stored, names are unique for good, expiry and revocation decide the state."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from knowbase.catalog import keys
from knowbase.catalog.db import Catalog
from knowbase.catalog.schema import api_key
from knowbase.errors import InvalidInput, KeyExists, NotFound

pytestmark = pytest.mark.timeout(60)


def test_a_key_is_stored_as_its_hash(backend_catalog: Catalog) -> None:
    with backend_catalog.write_tx() as conn:
        key, token = keys.create(
            conn, "agent", access="read", base_ids=["b1", "b1", "b2"], expires_at=None, now_ms=10
        )
    assert token.startswith("kb_") and len(token) > 40
    assert key.base_ids == ("b1", "b2") and key.access == "read" and key.state(11) == "active"
    with backend_catalog.read() as conn:
        stored = conn.execute(sa.select(api_key)).one()._mapping
        assert token not in {str(v) for v in stored.values()}
        assert stored["token_sha256"] == keys.token_hash(token)
        assert keys.find(conn, token) == key
        assert keys.find(conn, token[:-1] + ("A" if token[-1] != "A" else "B")) is None
        assert keys.find(conn, "not-a-kb-token") is None


def test_names_are_never_reused(backend_catalog: Catalog) -> None:
    with backend_catalog.write_tx() as conn:
        keys.create(conn, "ci", access="write", base_ids=None, expires_at=None, now_ms=1)
        revoked = keys.revoke(conn, "ci", now_ms=5)
        assert revoked.state(6) == "revoked" and keys.revoke(conn, "ci", now_ms=9) == revoked
        with pytest.raises(KeyExists):
            keys.create(conn, "ci", access="read", base_ids=None, expires_at=None, now_ms=7)
        with pytest.raises(NotFound):
            keys.revoke(conn, "nobody", now_ms=7)
        for bad in ("admin", "", "a b", "x" * 65, "-lead"):
            with pytest.raises(InvalidInput):
                keys.create(conn, bad, access="read", base_ids=None, expires_at=None, now_ms=1)
        with pytest.raises(InvalidInput):
            keys.create(conn, "ok", access="owner", base_ids=None, expires_at=None, now_ms=1)
        with pytest.raises(InvalidInput):  # already expired
            keys.create(conn, "ok", access="read", base_ids=None, expires_at=1, now_ms=1)


def test_expiry_and_any_live(backend_catalog: Catalog) -> None:
    with backend_catalog.write_tx() as conn:
        assert not keys.any_live(conn, 0)
        key, _ = keys.create(conn, "temp", access="read", base_ids=None, expires_at=100, now_ms=1)
        assert keys.any_live(conn, 99) and not keys.any_live(conn, 100)
        assert key.state(99) == "active" and key.state(100) == "expired"
        assert [k.name for k in keys.list_keys(conn)] == ["temp"]
