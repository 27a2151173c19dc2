"""The postgres store's vector lane: ``ORDER BY embedding <=> q`` over the base's rows with
``hnsw.ef_search`` set per query (:func:`.sql.ef_search_for`) and
``hnsw.iterative_scan = strict_order`` (the width table is shared by bases: the scan goes on
until enough rows of this base are found); an exact scan when a material scope is given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy.engine import Connection

from knowbase.errors import EmbeddingMismatch
from knowbase.index.postgres.keyword import within_sql
from knowbase.index.postgres.sql import JOIN, ef_search_for, vector_literal


def query_vector(vector: np.ndarray | Sequence[float], dims: int) -> np.ndarray | None:
    """``vector`` as float32, or None when it matches nothing (zero or not finite, as the
    SQLite lane); EmbeddingMismatch unless it is ``dims`` wide."""
    q = np.asarray(vector, dtype="<f4").ravel()
    if q.shape[0] != dims:
        raise EmbeddingMismatch(
            "query vector width does not match the base", dims=dims, got=q.shape[0]
        )
    norm = float(np.linalg.norm(q.astype(np.float64)))
    if not math.isfinite(norm) or norm == 0.0:
        return None
    return q


def vector_rows(
    conn: Connection,
    q: np.ndarray,
    limit: int,
    *,
    base_id: str,
    model_id: str,
    vec_table: str,
    columns: str,
    visible: str,
    within: frozenset[str] | None,
) -> list[Any]:
    """``columns`` plus the cosine similarity of the ``limit`` nearest units, nearest first,
    ties by unit id."""
    params = {"b": base_id, "mo": model_id, "q": vector_literal(q), "k": limit}
    if within is not None:
        # Exact over the scope: a MATERIALIZED CTE keeps the planner off the HNSW
        # index, whose candidate list would be cut before the scope's rows are found.
        scope, scope_args = within_sql(within)
        return conn.exec_driver_sql(
            f"""WITH cand AS MATERIALIZED (
              SELECT u.unit_id, v.embedding <=> %(q)s::vector AS dist
              FROM kb_unit u JOIN {vec_table} v ON v.base_id = u.base_id
                AND v.embedding_text_hash = u.embedding_text_hash AND v.model_id = %(mo)s
              WHERE u.base_id = %(b)s{scope})
            SELECT {columns}, 1 - cand.dist FROM cand
            JOIN kb_unit u ON u.base_id = %(b)s AND u.unit_id = cand.unit_id
            {JOIN} {visible}
            WHERE cand.dist IS NOT NULL AND cand.dist = cand.dist
            ORDER BY cand.dist, u.unit_id LIMIT %(k)s""",
            {**params, **scope_args},
        ).all()
    conn.exec_driver_sql(f"SET LOCAL hnsw.ef_search = {ef_search_for(limit)}")
    conn.exec_driver_sql("SET LOCAL hnsw.iterative_scan = strict_order")
    # The k nearest distinct vectors, then their units: a vector shared by equal bodies
    # is one row of the index and one or more units.
    return conn.exec_driver_sql(
        f"""WITH near AS MATERIALIZED (
          SELECT v.embedding_text_hash, v.embedding <=> %(q)s::vector AS dist
          FROM {vec_table} v WHERE v.base_id = %(b)s AND v.model_id = %(mo)s
          ORDER BY v.embedding <=> %(q)s::vector LIMIT %(k)s)
        SELECT {columns}, 1 - near.dist FROM near
        JOIN kb_unit u ON u.base_id = %(b)s
          AND u.embedding_text_hash = near.embedding_text_hash
        {JOIN} {visible}
        WHERE near.dist IS NOT NULL AND near.dist = near.dist
        ORDER BY near.dist, u.unit_id LIMIT %(k)s""",
        params,
    ).all()
