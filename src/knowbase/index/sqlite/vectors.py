"""The SQLite store's vector lane, as module functions on a reader connection: the query
vector's check, a material scope as a row mask, the matrix's load or patch at a version, the
exact SQL scan (tests, bench). Full hits for ``(unit_id, score)`` pairs, which the keyword
lane needs too, are :func:`.common.hits`.

The store (:class:`~.sqlite.SqliteIndexStore`) owns the cache key, the big-base lane and the
connections; these functions own the SQL.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

import apsw
import numpy as np

from knowbase.errors import EmbeddingMismatch
from knowbase.index.base import SearchHit
from knowbase.index.sqlite.common import HIT_COLUMNS, HIT_JOINS, Within, batches, hit, marks
from knowbase.index.vector.matrix import VectorMatrix


def query_vector(vector: np.ndarray | Sequence[float], dims: int | None) -> np.ndarray:
    """``vector`` as little-endian float32; EmbeddingMismatch unless it is ``dims`` wide."""
    q = np.asarray(vector, dtype="<f4").ravel()
    if q.shape[0] != dims:
        raise EmbeddingMismatch(
            "query vector width does not match the base", dims=dims, got=q.shape[0]
        )
    return q


def owners(conn: apsw.Connection, ids: Sequence[str]) -> dict[str, str]:
    """``{unit_id: material_id}`` of the units of ``ids`` that still exist."""
    owner: dict[str, str] = {}
    for batch in batches(ids):
        owner.update(
            conn.execute(
                "SELECT unit_id, material_id FROM search_unit"
                f" WHERE unit_id IN ({marks(len(batch))})",
                tuple(batch),
            ).fetchall()
        )
    return owner


#: Each matrix's ``{unit_id: material_id}`` as its searches meet them. A unit's material does
#: not change within a ``vectors_version``, so a loaded server stops reading them from SQL (the
#: read was ~9% of a hybrid search's CPU under 16 clients). Bounded per matrix; gone with it.
_OWNERS: weakref.WeakKeyDictionary[VectorMatrix, dict[str, str]] = weakref.WeakKeyDictionary()
_OWNERS_LOCK = threading.Lock()
OWNERS_MAX = 100_000


def owners_at(conn: apsw.Connection, matrix: VectorMatrix, ids: Sequence[str]) -> dict[str, str]:
    """:func:`owners` of units of ``matrix``, remembered with it. A unit deleted after the
    matrix was read may still get its owner; the hits read later skip it."""
    with _OWNERS_LOCK:
        memo = _OWNERS.setdefault(matrix, {})
    missing = [uid for uid in ids if uid not in memo]
    found = owners(conn, missing) if missing else {}
    if found and len(memo) + len(found) <= OWNERS_MAX:
        memo.update(found)
    return {uid: owner for uid in ids if (owner := memo.get(uid) or found.get(uid))}


def row_mask(conn: apsw.Connection, matrix: VectorMatrix, within: frozenset[str]) -> np.ndarray:
    """The matrix rows of the units of ``within``'s materials (units newer than the
    matrix are not in it; units deleted since have no row)."""
    mask = np.zeros(len(matrix.ids), dtype=bool)
    rows = matrix.rows
    scope = Within(within)
    found = conn.execute(
        f"SELECT su.unit_id FROM search_unit su WHERE 1{scope.sql}", scope.args
    ).fetchall()
    index = [i for (uid,) in found if (i := rows.get(uid)) is not None]
    mask[index] = True
    return mask


def load(
    conn: apsw.Connection,
    cached: VectorMatrix | None,
    version: int,
    *,
    dims: int,
    model_id: str,
) -> VectorMatrix:
    """``model_id``'s matrix at ``version``: ``cached`` patched when it has the same width,
    else a full load. The caller holds one read transaction."""
    select = (
        "SELECT su.unit_id, e.vector_blob FROM search_unit su"
        " JOIN search_text st ON st.target_type = 'search_unit'"
        " AND st.target_id = su.unit_id AND st.kind = 'body'"
        " JOIN embedding e ON e.embedding_text_hash = st.embedding_text_hash"
        " AND e.model_id = ?"
    )
    model = (model_id,)
    if cached is not None and cached.dims == dims:
        current = {r[0] for r in conn.execute("SELECT unit_id FROM search_unit")}
        added = sorted(current - cached.known)
        removed = cached.known - current
        # A patch costs what changed (the matrix appends and marks rows dead), so it is
        # never worse than a full load, however much changed.
        rows: list[tuple[str, bytes]] = []
        for batch in batches(added):
            rows.extend(
                conn.execute(
                    f"{select} WHERE su.unit_id IN ({marks(len(batch))})", (*model, *batch)
                )
            )
        return cached.patched(rows, removed, version=version)
    return VectorMatrix.from_rows(conn.execute(select, model), dims=dims, version=version)


def current(
    conn: apsw.Connection, cached: VectorMatrix | None, *, dims: int, model_id: str
) -> VectorMatrix:
    """``model_id``'s matrix at the current ``vectors_version``: ``cached`` itself when it is
    that version, else loaded or patched. One read transaction: the version label and the rows
    come from the same snapshot."""
    conn.execute("BEGIN")
    try:
        version = conn.execute("SELECT vectors_version FROM meta").fetchall()[0][0]
        if cached is not None and cached.version == version:
            return cached
        return load(conn, cached, version, dims=dims, model_id=model_id)
    finally:
        conn.execute("COMMIT")


def sql_scan(
    conn: apsw.Connection,
    q: np.ndarray,
    limit: int,
    *,
    model_id: str,
    within: frozenset[str] | None,
) -> list[SearchHit]:
    """An exact ``vec_distance_cosine`` scan in SQL, score = cosine similarity."""
    scope = Within(within)
    rows = conn.execute(
        f"SELECT {HIT_COLUMNS}, vec_distance_cosine(e.vector_blob, ?) AS dist"
        f" FROM search_text st {HIT_JOINS}"
        " JOIN embedding e ON e.embedding_text_hash = st.embedding_text_hash"
        " AND e.model_id = ?"
        f" WHERE st.kind = 'body' AND dist IS NOT NULL{scope.sql}"
        " ORDER BY dist, su.unit_id LIMIT ?",
        (q.tobytes(), model_id, *scope.args, limit),
    ).fetchall()
    return [hit(r[:-1], 1.0 - float(r[-1])) for r in rows]
