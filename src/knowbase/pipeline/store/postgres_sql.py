"""The postgres backend's SQL pieces: constants, hit columns, errors, the vector tables.

Vectors live in ``kb_vec_<dims>`` (one table per embedding width, made on first use by
:func:`ensure_vector_table`) with an HNSW index (``vector_cosine_ops``); like SQLite's
``embedding`` table they are keyed by body hash, so equal bodies share a vector.
"""

from __future__ import annotations

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.errors import InvalidInput, KnowbaseError, Unavailable, VectorStoreUnavailable

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
# Visibility through the catalog in the same database: only completed items of this base.
VISIBLE = """JOIN knowledge_item ki ON ki.id = u.material_id AND ki.base_id = u.base_id
  AND ki.status = 'completed'"""


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
        " embedding_text_hash text NOT NULL,"
        f" embedding vector({dims}) NOT NULL,"
        " PRIMARY KEY (base_id, embedding_text_hash))"
    )
    if dims <= HNSW_MAX_DIMS:
        conn.exec_driver_sql(
            f"CREATE INDEX IF NOT EXISTS {table}_hnsw ON {table}"
            " USING hnsw (embedding vector_cosine_ops)"
        )
    return table
