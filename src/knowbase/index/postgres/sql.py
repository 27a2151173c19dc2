"""The postgres backend's SQL pieces: constants, hit columns, errors, the vector tables.

Vectors live in ``kb_vec_<dims>`` (one table per embedding width, made on first use by
:func:`ensure_vector_table`) with an HNSW index (``vector_cosine_ops``); like SQLite's
``embedding`` table they are keyed by model id and body hash, so equal bodies share a vector and
a model switch builds the new model's set beside the old one. A table of the older layout
(keyed by body hash alone) is upgraded in place on first use, its rows labelled with their
base's current model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.errors import InvalidInput, KnowbaseError, Unavailable, VectorStoreUnavailable
from knowbase.index.base import SearchHit

SCHEMA_VERSION = 1
HNSW_MAX_DIMS = 2000  # pgvector's limit for an HNSW index on ``vector``
# Measured with bench/scale_out.py (100k x 384, low-rank clustered vectors, m=16,
# ef_construction=64; recall@10 against the exact scan): ef_search 10 → 0.821, 40 → 0.987,
# 100 → 0.999, 200 → 1.000; median 3.0 / 7.1 / 4.9 / 6.2 ms against 97 ms exact. The recall
# target is 0.95 with margin: 100 (pgvector's default of 40 sits at the edge; on i.i.d. noise it
# gives far less, which says nothing about real embeddings).
EF_SEARCH_MIN = 100
EF_SEARCH_MAX = 1000  # pgvector's limit

HIT = """u.unit_id, u.material_id, m.relative_path, u.unit_index, u.char_start, u.char_end,
  u.body, u.title, u.locator_json"""
LANE = "u.unit_id, u.material_id"  # a lane's columns: the text is read for shown hits only
JOIN = "JOIN kb_material m ON m.base_id = u.base_id AND m.material_id = u.material_id"


def visible_join(statuses: Sequence[str]) -> str:
    """Visibility through the catalog in the same database: the join that keeps the units of
    this base's items in ``statuses`` (the catalog's searchable ones, handed down by whoever
    opens the store: completed, or re-indexed in place); no join when ``statuses`` is empty."""
    if not statuses:
        return ""
    return f"""JOIN knowledge_item ki ON ki.id = u.material_id AND ki.base_id = u.base_id
  AND ki.status IN ({", ".join(repr(s) for s in statuses)})"""


def hits(rows: Iterable[Sequence[Any]]) -> list[SearchHit]:
    """Hits of rows of ``HIT`` columns and a score."""
    out = []
    for uid, mid, path, idx, start, end, text, title, loc, score in rows:
        locator = json.loads(loc) if loc else {}
        out.append(SearchHit(uid, mid, path, idx, start, end, text, float(score), title, locator))
    return out


def ef_search_for(limit: int) -> int:
    """HNSW's candidate list for a query of ``limit``: never under the measured floor, and at
    least twice the rows asked for (a list shorter than the limit cannot return the limit)."""
    return max(EF_SEARCH_MIN, min(EF_SEARCH_MAX, 2 * limit))


def vector_literal(vec: np.ndarray) -> str:
    return "[" + ",".join(repr(float(x)) for x in vec) + "]"


def map_error(exc: Exception, op: str, base_id: str) -> KnowbaseError:
    details = {"op": op, "base_id": base_id, "pg_error": type(exc).__name__}
    if isinstance(exc, sa.exc.IntegrityError):
        return InvalidInput(f"index constraint failed ({op}): {exc.orig}", **details)
    if isinstance(exc, sa.exc.OperationalError):
        return Unavailable(
            f"the index database cannot be reached ({op})", transient=True, **details
        )
    return KnowbaseError(f"index error ({op}): {exc}", **details)


def ensure_vector_table(conn: Connection, base_id: str, dims: int) -> str:
    """The width's vector table (made on first use, with its HNSW index); its name.

    VectorStoreUnavailable (``reason = vector_extension_missing``) without pgvector.
    """
    has = conn.exec_driver_sql("SELECT 1 FROM pg_extension WHERE extname = 'vector'").first()
    if has is None:
        raise VectorStoreUnavailable(
            "the PostgreSQL server has no 'vector' extension (pgvector)",
            hint="install pgvector on the server and run CREATE EXTENSION vector in this database",
            base_id=base_id,
            reason="vector_extension_missing",
        )
    table = f"kb_vec_{dims}"
    # One creator at a time across processes; IF NOT EXISTS alone races on the catalog.
    conn.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtext(%(t)s))", {"t": table})
    conn.exec_driver_sql(
        f"CREATE TABLE IF NOT EXISTS {table} ("
        " base_id varchar(36) NOT NULL REFERENCES kb_index(base_id) ON DELETE CASCADE,"
        " model_id text NOT NULL,"
        " embedding_text_hash text NOT NULL,"
        f" embedding vector({dims}) NOT NULL,"
        " PRIMARY KEY (base_id, model_id, embedding_text_hash))"
    )
    _upgrade_model_key(conn, table)
    if dims <= HNSW_MAX_DIMS:
        conn.exec_driver_sql(
            f"CREATE INDEX IF NOT EXISTS {table}_hnsw ON {table}"
            " USING hnsw (embedding vector_cosine_ops)"
        )
    return table


def _upgrade_model_key(conn: Connection, table: str) -> None:
    """A ``kb_vec`` table of the older layout gains ``model_id`` (each row labelled with its
    base's current model) and the model-keyed primary key, in the caller's transaction (under
    the table's advisory lock): a user's vectors are never dropped for it."""
    has = conn.exec_driver_sql(
        "SELECT 1 FROM information_schema.columns WHERE table_name = %(t)s"
        " AND column_name = 'model_id' AND table_schema = current_schema()",
        {"t": table},
    ).first()
    if has is not None:
        return
    conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN model_id text")
    conn.exec_driver_sql(
        f"UPDATE {table} v SET model_id = COALESCE(kb.embedding_model_id, '')"
        " FROM knowledge_base kb WHERE kb.id = v.base_id"
    )
    conn.exec_driver_sql(f"UPDATE {table} SET model_id = '' WHERE model_id IS NULL")
    conn.exec_driver_sql(f"ALTER TABLE {table} ALTER COLUMN model_id SET NOT NULL")
    conn.exec_driver_sql(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {table}_pkey")
    conn.exec_driver_sql(
        f"ALTER TABLE {table} ADD PRIMARY KEY (base_id, model_id, embedding_text_hash)"
    )


def vector_tables(conn: Connection) -> list[str]:
    """Every ``kb_vec_<dims>`` table of this database."""
    rows = conn.exec_driver_sql(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        " AND tablename ~ '^kb_vec_[0-9]+$' ORDER BY tablename"
    )
    return [r[0] for r in rows]
