"""The index backends and how a base's backend is opened (DESIGN "Index backends").

A base records its backend by name (``knowledge_base.index_backend``); the runtime asks this
registry to open it and never names one itself. ``sqlite`` keeps the index in the base's own
file (the embedded default); ``postgres`` keeps it in the catalog database (pgvector + full-text
search; the default when the catalog is on PostgreSQL); ``qdrant`` keeps vectors in Qdrant (a
URL, or local mode next to the index file) and the rest in the store next to the catalog.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowbase.errors import InvalidInput, KnowbaseError, VectorStoreUnavailable
from knowbase.index.base import IndexStore

__all__ = ["POSTGRES", "QDRANT", "SQLITE", "default_for", "check_usable", "get"]

# The names a base's ``index_backend`` column may hold (the catalog checks them on insert).
SQLITE = "sqlite"
POSTGRES = "postgres"
QDRANT = "qdrant"


@dataclass(frozen=True)
class StoreTarget:
    """Where a base's index lives: its own file, or the catalog's database."""

    base_id: str
    dims: int | None
    index_path: Path
    engine: Any = None  # the catalog's sqlalchemy Engine
    qdrant_location: str | None = None  # a URL, or None: local mode next to the index file
    quantized_min_rows: int | None = None  # the big-base lane's threshold; None: the default
    model_id: str | None = None  # whose vectors the store serves (vectors are keyed by model)
    # the catalog's statuses whose items a search sees, for a backend whose lanes join the
    # catalog's item rows (postgres); the opener hands them, the index does not know them
    searchable_statuses: tuple[str, ...] = ()


@dataclass(frozen=True)
class Backend:
    """How to open, and test for, one kind of index."""

    name: str
    open: Callable[[StoreTarget, bool], IndexStore]
    exists: Callable[[StoreTarget], bool]


def _open_sqlite(target: StoreTarget, create: bool) -> IndexStore:
    from knowbase.index.sqlite.store import SqliteIndexStore

    store = SqliteIndexStore.open(
        target.index_path,
        base_id=target.base_id,
        dims=target.dims,
        create=create,
        model_id=target.model_id,
    )
    if target.quantized_min_rows is not None:
        store.quantized_min_rows = target.quantized_min_rows
    return store


def _open_postgres(target: StoreTarget, create: bool) -> IndexStore:
    from knowbase.index.postgres.store import PostgresIndexStore

    if target.engine is None or target.engine.dialect.name != "postgresql":
        raise VectorStoreUnavailable(
            "the postgres index backend needs the catalog on PostgreSQL", base_id=target.base_id
        )
    # Searches see only the searchable items of the base, by a join in the lane's own query.
    return PostgresIndexStore.open(
        target.engine,
        base_id=target.base_id,
        dims=target.dims,
        create=create,
        visible_statuses=target.searchable_statuses,
        model_id=target.model_id,
    )


def _postgres_exists(target: StoreTarget) -> bool:
    from knowbase.index.postgres.store import PostgresIndexStore

    return target.engine is not None and PostgresIndexStore.exists(target.engine, target.base_id)


_QDRANT_CLIENTS: dict[str, Any] = {}  # local mode locks its folder: one client per process
_QDRANT_LOCK = threading.Lock()


def _open_qdrant(target: StoreTarget, create: bool) -> IndexStore:
    """Vectors in Qdrant, the rest in a BM25-only store next to the catalog."""
    from dataclasses import replace

    from knowbase.index.qdrant.store import QdrantIndexStore, connect

    on_pg = target.engine is not None and target.engine.dialect.name == "postgresql"
    inner_target = replace(target, dims=None)
    inner = (_open_postgres if on_pg else _open_sqlite)(inner_target, create)
    location = target.qdrant_location or str(target.index_path.parent / "qdrant")

    def client() -> Any:
        with _QDRANT_LOCK:
            found = _QDRANT_CLIENTS.get(location)
            if found is None:
                found = _QDRANT_CLIENTS[location] = connect(location)
            return found

    try:
        # A BM25-only base is a Qdrant store too, without a collection: it connects only once
        # a model switch (enable-embedding) writes its vectors, which must land in Qdrant.
        return QdrantIndexStore.open(
            client() if target.dims is not None else None,
            inner,
            base_id=target.base_id,
            dims=target.dims,
            model_id=target.model_id,
            connect=client,
        )
    except BaseException:
        inner.close()
        raise


def close_qdrant_clients() -> None:
    """Close the process's Qdrant clients (local mode releases its folder lock)."""
    with _QDRANT_LOCK:
        clients = list(_QDRANT_CLIENTS.values())
        _QDRANT_CLIENTS.clear()
    for client in clients:
        client.close()


def _qdrant_exists(target: StoreTarget) -> bool:
    on_pg = target.engine is not None and target.engine.dialect.name == "postgresql"
    return _postgres_exists(target) if on_pg else target.index_path.exists()


BACKENDS: dict[str, Backend] = {
    SQLITE: Backend(SQLITE, _open_sqlite, lambda t: t.index_path.exists()),
    POSTGRES: Backend(POSTGRES, _open_postgres, _postgres_exists),
    QDRANT: Backend(QDRANT, _open_qdrant, _qdrant_exists),
}


def get(name: str) -> Backend:
    """The backend called ``name``; InvalidInput names the known ones otherwise."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise InvalidInput(
            f"unknown index backend {name!r}", index_backend=name, known=sorted(BACKENDS)
        ) from None


def check_usable(name: str, dialect: str) -> Backend:
    """The backend called ``name`` when a base of this catalog (``dialect``) can use it; else
    InvalidInput: a configuration error the caller fixes, not an index that is down."""
    backend = get(name)
    if name == POSTGRES and dialect != "postgresql":
        raise InvalidInput(
            "the postgres index backend needs the catalog on PostgreSQL",
            hint="set KNOWBASE_DATABASE_URL to a PostgreSQL database, or use index_backend "
            "'sqlite' or 'qdrant'",
            index_backend=name,
            catalog=dialect,
        )
    return backend


def default_for(dialect: str) -> str:
    """The backend a new base gets: its index next to the catalog."""
    return POSTGRES if dialect == "postgresql" else SQLITE


def is_transient(exc: KnowbaseError) -> bool:
    """An open error that a later try may not hit (the backend marked it so)."""
    return bool(exc.details.get("transient"))


def fails_base(exc: KnowbaseError) -> bool:
    """Whether an open error means the base's index is gone (fail the base) rather than a
    server the operator can fix — a missing feature to install, a Qdrant server that does not
    answer — after which the base works again as it is."""
    return exc.details.get("reason") not in _SERVER_REASONS


_SERVER_REASONS = frozenset({"vector_extension_missing", "qdrant"})
