"""The index in the catalog's PostgreSQL database: pgvector HNSW + full-text search (§3).

Tables (migration ``0002s``): ``kb_index`` (one row per base: versions and the BM25 totals),
``kb_content``, ``kb_material``, ``kb_unit`` (one row per search unit: its body, the hash of the
body's embedding and the keyword ``tsvector``), all keyed by base id and deleted with the base.
Vectors: ``kb_vec_<dims>`` with HNSW (:mod:`.postgres_sql`). Keyword lane: the SQLite lane's
keyword text and FTS5's BM25 recomputed in SQL (:mod:`.postgres_keyword`).

Vector lane: ``ORDER BY embedding <=> q`` over the base's rows with ``hnsw.ef_search`` set per
query (:func:`ef_search_for`) and ``hnsw.iterative_scan = strict_order`` (the width table is
shared by bases: the scan goes on until enough rows of this base are found).

Every write is one transaction that first locks the base's ``kb_index`` row, so writers of one
base queue there even across machines. Without the ``vector`` extension a vector base cannot be
opened (``vector_store_unavailable``, ``reason = vector_extension_missing``); BM25-only bases work.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from knowbase.errors import Conflict, EmbeddingMismatch, InvalidInput, VectorStoreUnavailable
from knowbase.pipeline.store.base import LaneHit, MaterialInput, SearchHit, UnitRecord
from knowbase.pipeline.store.fts_query import build_keyword_query
from knowbase.pipeline.store.lease import Leases
from knowbase.pipeline.store.plan import check_vectors, plan_units
from knowbase.pipeline.store.postgres_keyword import keyword_rows, keyword_words, within_sql
from knowbase.pipeline.store.postgres_models import PostgresModelSets
from knowbase.pipeline.store.postgres_sql import (
    HIT,
    JOIN,
    LANE,
    SCHEMA_VERSION,
    VISIBLE,
    ef_search_for,
    ensure_vector_table,
    map_error,
    vector_literal,
)

log = logging.getLogger(__name__)


class PostgresIndexStore(PostgresModelSets):
    """The IndexStore protocol over the ``kb_*`` tables. Open with :meth:`open`."""

    def __init__(
        self,
        engine: Engine,
        *,
        base_id: str,
        dims: int | None,
        visibility_join: bool,
        model_id: str | None = None,
    ) -> None:
        self.engine = engine
        self.base_id = base_id
        self.dims = dims
        self.model_id = model_id or ""  # whose vectors this store writes and searches
        self.was_reset = False
        self.visibility_join = visibility_join
        self.vec_table = f"kb_vec_{dims}" if dims is not None else None
        self.leases = Leases(lambda: None, what=f"postgres index of {base_id}")

    # --- lifecycle -----------------------------------------------------------------------
    @staticmethod
    def exists(engine: Engine, base_id: str) -> bool:
        with engine.connect() as conn:
            row = conn.exec_driver_sql(
                "SELECT 1 FROM kb_index WHERE base_id = %(b)s", {"b": base_id}
            ).first()
        return row is not None

    @classmethod
    def open(
        cls,
        engine: Engine,
        *,
        base_id: str,
        dims: int | None,
        create: bool = True,
        visibility_join: bool = False,
        model_id: str | None = None,
    ) -> PostgresIndexStore:
        """Mount the base's index rows, creating them when ``create``.

        VectorStoreUnavailable when the rows are missing (``create=False``), or when a vector
        base meets a server without the ``vector`` extension (``reason`` says so).
        """
        if dims is not None and dims <= 0:
            raise InvalidInput("dims must be positive", dims=dims)
        store = cls(
            engine, base_id=base_id, dims=dims, visibility_join=visibility_join, model_id=model_id
        )
        try:
            with engine.begin() as conn:
                if dims is not None:
                    ensure_vector_table(conn, base_id, dims)
                row = conn.exec_driver_sql(
                    "SELECT schema_version FROM kb_index WHERE base_id = %(b)s", {"b": base_id}
                ).first()
                if row is None and not create:
                    raise VectorStoreUnavailable(
                        "the base's index rows are missing", base_id=base_id
                    )
                if row is None:
                    conn.exec_driver_sql(
                        "INSERT INTO kb_index (base_id, schema_version) VALUES (%(b)s, %(v)s)"
                        " ON CONFLICT (base_id) DO NOTHING",
                        {"b": base_id, "v": SCHEMA_VERSION},
                    )
                elif row[0] != SCHEMA_VERSION:
                    store._reset(conn)
        except sa.exc.SQLAlchemyError as exc:
            raise map_error(exc, "open", base_id) from exc
        return store

    def _reset(self, conn: Connection) -> None:
        conn.exec_driver_sql("DELETE FROM kb_material WHERE base_id = %(b)s", {"b": self.base_id})
        conn.exec_driver_sql("DELETE FROM kb_content WHERE base_id = %(b)s", {"b": self.base_id})
        conn.exec_driver_sql(
            "UPDATE kb_index SET schema_version = %(v)s, unit_count = 0, token_count = 0,"
            " vectors_version = vectors_version + 1 WHERE base_id = %(b)s",
            {"b": self.base_id, "v": SCHEMA_VERSION},
        )
        self.was_reset = True

    def hold(self) -> AbstractContextManager[None]:
        return self.leases.hold()

    def close(self) -> None:
        """Nothing to release: the connections are the catalog's pool."""
        self.leases.close()

    @contextmanager
    def _tx(self, op: str) -> Iterator[Connection]:
        with self.leases.hold():
            try:
                with self.engine.begin() as conn:
                    yield conn
            except sa.exc.SQLAlchemyError as exc:
                raise map_error(exc, op, self.base_id) from exc

    def _lock_base(self, conn: Connection) -> None:
        row = conn.exec_driver_sql(
            "SELECT 1 FROM kb_index WHERE base_id = %(b)s FOR UPDATE", {"b": self.base_id}
        ).first()
        if row is None:
            raise VectorStoreUnavailable("the base's index rows are gone", base_id=self.base_id)

    # --- writes ----------------------------------------------------------------------------
    def rebuild_material(
        self, material: MaterialInput, embeddings: Mapping[str, np.ndarray | Sequence[float]]
    ) -> None:
        """Replace one material's units in one transaction; see SqliteIndexStore's contract."""
        content_hash, units = plan_units(material, self.dims, bool(embeddings))
        needed = sorted({u.body_hash for u in units})
        vectors = check_vectors(embeddings, needed, self.dims) if self.dims is not None else {}
        rows = self._unit_rows(material, content_hash, units)
        with self._tx("rebuild_material") as conn:
            self._lock_base(conn)
            self._write_material(
                conn, material, content_hash, rows, vectors, self.model_id, self.vec_table
            )

    def _unit_rows(
        self, material: MaterialInput, content_hash: str, units: Sequence[Any]
    ) -> list[dict[str, Any]]:
        b, mid = self.base_id, material.material_id
        rows = []
        for u in units:
            words = keyword_words(u.text)
            loc = json.dumps(u.chunk.locator, ensure_ascii=False) if u.chunk.locator else None
            rows.append(
                {
                    "b": b,
                    "u": u.unit_id,
                    "m": mid,
                    "c": content_hash,
                    "i": u.chunk.unit_index,
                    "t": material.title,
                    "s": u.chunk.char_start,
                    "e": u.chunk.char_end,
                    "l": loc,
                    "body": u.body,
                    "h": u.body_hash,
                    "kw": " ".join(words),
                    "n": len(words),
                }
            )
        return rows

    def _write_material(
        self,
        conn: Connection,
        material: MaterialInput,
        content_hash: str,
        rows: list[dict[str, Any]],
        vectors: Mapping[str, np.ndarray],
        model_id: str,
        vec_table: str | None,
        *,
        gc: bool = True,
    ) -> None:
        """The rebuild's statements in the caller's transaction (base row locked); coverage
        is checked against ``model_id``'s vectors in ``vec_table`` when it is set."""
        b, mid = self.base_id, material.material_id
        needed = sorted({r["h"] for r in rows})
        conn.exec_driver_sql(
            "INSERT INTO kb_content (base_id, content_hash, text) VALUES (%(b)s, %(c)s, %(t)s)"
            " ON CONFLICT DO NOTHING",
            {"b": b, "c": content_hash, "t": material.content_text},
        )
        other = conn.exec_driver_sql(
            "SELECT material_id FROM kb_material WHERE base_id = %(b)s"
            " AND relative_path = %(p)s AND material_id <> %(m)s",
            {"b": b, "p": material.relative_path, "m": mid},
        ).first()
        if other:
            raise Conflict(
                "another material already has this relative path",
                relative_path=material.relative_path,
                material_id=other[0],
            )
        prior = conn.exec_driver_sql(
            "SELECT current_content_hash FROM kb_material"
            " WHERE base_id = %(b)s AND material_id = %(m)s",
            {"b": b, "m": mid},
        ).first()
        conn.exec_driver_sql(
            "INSERT INTO kb_material (base_id, material_id, relative_path,"
            " current_content_hash) VALUES (%(b)s, %(m)s, %(p)s, %(c)s)"
            " ON CONFLICT (base_id, material_id) DO UPDATE SET"
            " relative_path = excluded.relative_path,"
            " current_content_hash = excluded.current_content_hash, updated_at = now()",
            {"b": b, "m": mid, "p": material.relative_path, "c": content_hash},
        )
        old = conn.exec_driver_sql(
            "DELETE FROM kb_unit WHERE base_id = %(b)s AND material_id = %(m)s"
            " RETURNING embedding_text_hash, content_hash, keyword_len",
            {"b": b, "m": mid},
        ).all()
        if rows:
            conn.exec_driver_sql(
                "INSERT INTO kb_unit (base_id, unit_id, material_id, content_hash,"
                " unit_index, title, char_start, char_end, locator_json, body,"
                " embedding_text_hash, keyword, keyword_len) VALUES (%(b)s, %(u)s, %(m)s,"
                " %(c)s, %(i)s, %(t)s, %(s)s, %(e)s, %(l)s, %(body)s, %(h)s,"
                " to_tsvector('kb_keyword', %(kw)s), %(n)s)",
                rows,
            )
        if vectors:
            conn.exec_driver_sql(
                f"INSERT INTO {vec_table} (base_id, model_id, embedding_text_hash, embedding)"
                " VALUES (%(b)s, %(mo)s, %(h)s, %(v)s::vector) ON CONFLICT DO NOTHING",
                [
                    {"b": b, "mo": model_id, "h": h, "v": vector_literal(v)}
                    for h, v in vectors.items()
                ],
            )
        if vec_table is not None:
            self._check_coverage(conn, needed, mid, model_id, vec_table)
        hashes = {r[0] for r in old} if gc else set()
        contents = {r[1] for r in old} | ({prior[0]} if prior else set())
        self._gc(conn, hashes, contents - {content_hash})
        self._account(
            conn, len(rows) - len(old), sum(r["n"] for r in rows) - sum(r[2] for r in old)
        )

    def _check_coverage(
        self,
        conn: Connection,
        needed: Sequence[str],
        material_id: str,
        model_id: str,
        vec_table: str,
    ) -> None:
        found = {
            r[0]
            for r in conn.exec_driver_sql(
                f"SELECT embedding_text_hash FROM {vec_table} WHERE base_id = %(b)s"
                " AND model_id = %(mo)s AND embedding_text_hash = ANY(%(h)s)",
                {"b": self.base_id, "mo": model_id, "h": list(needed)},
            )
        }
        missing = [h for h in needed if h not in found]
        if missing:
            raise EmbeddingMismatch(
                f"{len(missing)} chunk(s) have no embedding; nothing was changed",
                material_id=material_id,
                missing=missing[:10],
            )

    def _gc(self, conn: Connection, hashes: set[str], contents: set[str]) -> None:
        """Drop the vectors and texts that the rows just deleted were the last users of."""
        b = self.base_id
        if hashes and self.vec_table is not None:
            # The serving model's set only: a switch's shadow set is dropped as a whole.
            conn.exec_driver_sql(
                f"DELETE FROM {self.vec_table} v WHERE v.base_id = %(b)s AND v.model_id = %(mo)s"
                " AND v.embedding_text_hash = ANY(%(h)s) AND NOT EXISTS (SELECT 1 FROM kb_unit u"
                " WHERE u.base_id = v.base_id AND u.embedding_text_hash = v.embedding_text_hash)",
                {"b": b, "mo": self.model_id, "h": sorted(hashes)},
            )
        if contents:
            conn.exec_driver_sql(
                "DELETE FROM kb_content c WHERE c.base_id = %(b)s AND c.content_hash = ANY(%(c)s)"
                " AND NOT EXISTS (SELECT 1 FROM kb_material m WHERE m.base_id = c.base_id"
                " AND m.current_content_hash = c.content_hash)"
                " AND NOT EXISTS (SELECT 1 FROM kb_unit u WHERE u.base_id = c.base_id"
                " AND u.content_hash = c.content_hash)",
                {"b": b, "c": sorted(contents)},
            )

    def _account(self, conn: Connection, units: int, tokens: int) -> None:
        conn.exec_driver_sql(
            "UPDATE kb_index SET vectors_version = vectors_version + 1, updated_at = now(),"
            " unit_count = unit_count + %(u)s, token_count = token_count + %(t)s"
            " WHERE base_id = %(b)s",
            {"b": self.base_id, "u": units, "t": tokens},
        )

    def existing_embedding_hashes(self, hashes: Iterable[str]) -> set[str]:
        wanted = sorted(set(hashes))
        if self.vec_table is None or not wanted:
            return set()
        with self._tx("existing_embedding_hashes") as conn:
            rows = conn.exec_driver_sql(
                f"SELECT embedding_text_hash FROM {self.vec_table} WHERE base_id = %(b)s"
                " AND model_id = %(mo)s AND embedding_text_hash = ANY(%(h)s)",
                {"b": self.base_id, "mo": self.model_id, "h": wanted},
            )
            return {r[0] for r in rows}

    def stored_vectors(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """``{embedding_text_hash: vector}`` of the serving model (float32, exactly as stored)
        for the ``hashes`` that have one; an export reads vectors here, nothing is re-embedded."""
        if self.dims is None or not self.model_id:
            return {}
        return self.vectors_for(hashes, self.model_id)

    def delete_materials(self, material_ids: Iterable[str]) -> None:
        """Delete the materials and what only they used, in one transaction."""
        ids = sorted(set(material_ids))
        if not ids:
            return
        with self._tx("delete_materials") as conn:
            self._lock_base(conn)
            params = {"b": self.base_id, "m": ids}
            old = conn.exec_driver_sql(
                "DELETE FROM kb_unit WHERE base_id = %(b)s AND material_id = ANY(%(m)s)"
                " RETURNING embedding_text_hash, content_hash, keyword_len",
                params,
            ).all()
            gone = conn.exec_driver_sql(
                "DELETE FROM kb_material WHERE base_id = %(b)s AND material_id = ANY(%(m)s)"
                " RETURNING current_content_hash",
                params,
            ).all()
            if not old and not gone:
                return
            self._gc(conn, {r[0] for r in old}, {r[1] for r in old} | {r[0] for r in gone})
            self._account(conn, -len(old), -sum(r[2] for r in old))

    def reclaim(self) -> None:
        """Nothing to do: autovacuum reclaims PostgreSQL's dead rows."""

    # --- reads -----------------------------------------------------------------------------
    def _visible(self) -> str:
        return VISIBLE if self.visibility_join else ""

    def _hits(self, rows: Iterable[Sequence[Any]]) -> list[SearchHit]:
        out = []
        for uid, mid, path, idx, start, end, text, title, loc, score in rows:
            locator = json.loads(loc) if loc else {}
            out.append(
                SearchHit(uid, mid, path, idx, start, end, text, float(score), title, locator)
            )
        return out

    def keyword_lane(
        self, query: str, limit: int, *, within: frozenset[str] | None = None
    ) -> list[LaneHit]:
        """FTS5-equivalent BM25 or the LIKE fallback on :mod:`.keyword_scale`'s absolute scale,
        ties by Concept ID and unit order, among ``within``'s materials when given; see
        :mod:`.postgres_keyword`."""
        return [LaneHit(u, m, float(s)) for u, m, s in self._keyword(query, limit, LANE, within)]

    def keyword_search(
        self, query: str, limit: int, *, within: frozenset[str] | None = None
    ) -> list[SearchHit]:
        """:meth:`keyword_lane` with text, Concept ID and locator per hit."""
        return self._hits(self._keyword(query, limit, HIT, within))

    def _keyword(
        self, query: str, limit: int, columns: str, within: frozenset[str] | None
    ) -> list[Any]:
        kq = build_keyword_query(query)
        if limit <= 0 or kq.mode == "none" or (within is not None and not within):
            return []
        with self._tx("keyword_search") as conn:
            return keyword_rows(
                conn, self.base_id, kq, limit, self._visible(), columns=columns, within=within
            )

    def vector_lane(
        self, vector: np.ndarray, limit: int, *, within: frozenset[str] | None = None
    ) -> list[LaneHit]:
        """Cosine top-``limit`` (score = cosine similarity): approximate through HNSW, or an
        exact scan of ``within``'s units when given (HNSW cannot cut among a scope's rows)."""
        rows = self._vector(vector, limit, LANE, within)
        return [LaneHit(u, m, float(s)) for u, m, s in rows]

    def vector_search(
        self, vector: np.ndarray, limit: int, *, within: frozenset[str] | None = None
    ) -> list[SearchHit]:
        """:meth:`vector_lane` with text, Concept ID and locator per hit."""
        return self._hits(self._vector(vector, limit, HIT, within))

    def _vector(
        self, vector: np.ndarray, limit: int, columns: str, within: frozenset[str] | None
    ) -> list[Any]:
        if self.dims is None or limit <= 0 or (within is not None and not within):
            return []
        q = np.asarray(vector, dtype="<f4").ravel()
        if q.shape[0] != self.dims:
            raise EmbeddingMismatch(
                "query vector width does not match the base", dims=self.dims, got=q.shape[0]
            )
        norm = float(np.linalg.norm(q.astype(np.float64)))
        if not math.isfinite(norm) or norm == 0.0:
            return []  # matches nothing, as the SQLite lane
        params = {"b": self.base_id, "mo": self.model_id, "q": vector_literal(q), "k": limit}
        with self._tx("vector_search") as conn:
            if within is not None:
                # Exact over the scope: a MATERIALIZED CTE keeps the planner off the HNSW
                # index, whose candidate list would be cut before the scope's rows are found.
                scope, scope_args = within_sql(within)
                return conn.exec_driver_sql(
                    f"""WITH cand AS MATERIALIZED (
                      SELECT u.unit_id, v.embedding <=> %(q)s::vector AS dist
                      FROM kb_unit u JOIN {self.vec_table} v ON v.base_id = u.base_id
                        AND v.embedding_text_hash = u.embedding_text_hash AND v.model_id = %(mo)s
                      WHERE u.base_id = %(b)s{scope})
                    SELECT {columns}, 1 - cand.dist FROM cand
                    JOIN kb_unit u ON u.base_id = %(b)s AND u.unit_id = cand.unit_id
                    {JOIN} {self._visible()}
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
                  FROM {self.vec_table} v WHERE v.base_id = %(b)s AND v.model_id = %(mo)s
                  ORDER BY v.embedding <=> %(q)s::vector LIMIT %(k)s)
                SELECT {columns}, 1 - near.dist FROM near
                JOIN kb_unit u ON u.base_id = %(b)s
                  AND u.embedding_text_hash = near.embedding_text_hash
                {JOIN} {self._visible()}
                WHERE near.dist IS NOT NULL AND near.dist = near.dist
                ORDER BY near.dist, u.unit_id LIMIT %(k)s""",
                params,
            ).all()

    def hits_for(self, pairs: Sequence[tuple[str, float]]) -> list[SearchHit]:
        """Full hits for ``(unit_id, score)`` pairs, in their order (the hits a search shows,
        an external vector lane); units gone meanwhile are skipped."""
        if not pairs:
            return []
        with self._tx("hits_for") as conn:
            rows = conn.exec_driver_sql(
                f"SELECT {HIT}, 0 FROM kb_unit u {JOIN} {self._visible()}"
                " WHERE u.base_id = %(b)s AND u.unit_id = ANY(%(u)s)",
                {"b": self.base_id, "u": [uid for uid, _ in pairs]},
            ).all()
        found = {h.unit_id: h for h in self._hits(rows)}
        return [replace(found[uid], score=score) for uid, score in pairs if uid in found]

    def _one(self, op: str, sql: str, **params: Any) -> Any:
        with self._tx(op) as conn:
            row = conn.exec_driver_sql(sql, {"b": self.base_id, **params}).first()
        return row[0] if row else None

    def material_path(self, material_id: str) -> str | None:
        return self._one(
            "material_path",
            "SELECT relative_path FROM kb_material WHERE base_id = %(b)s AND material_id = %(m)s",
            m=material_id,
        )

    def material_by_path(self, relative_path: str) -> str | None:
        return self._one(
            "material_by_path",
            "SELECT material_id FROM kb_material WHERE base_id = %(b)s AND relative_path = %(p)s",
            p=relative_path,
        )

    def content_text(self, material_id: str) -> str | None:
        return self._one(
            "content_text",
            "SELECT c.text FROM kb_material m JOIN kb_content c ON c.base_id = m.base_id"
            " AND c.content_hash = m.current_content_hash"
            " WHERE m.base_id = %(b)s AND m.material_id = %(m)s",
            m=material_id,
        )

    def list_units(self, material_id: str) -> list[UnitRecord]:
        with self._tx("list_units") as conn:
            rows = conn.exec_driver_sql(
                "SELECT unit_id, unit_index, char_start, char_end, body, locator_json FROM kb_unit"
                " WHERE base_id = %(b)s AND material_id = %(m)s ORDER BY unit_index",
                {"b": self.base_id, "m": material_id},
            ).all()
        return [
            UnitRecord(uid, idx, s, e, text, json.loads(loc) if loc else {})
            for uid, idx, s, e, text, loc in rows
        ]

    def material_ids(self) -> set[str]:
        with self._tx("material_ids") as conn:
            rows = conn.exec_driver_sql(
                "SELECT material_id FROM kb_material WHERE base_id = %(b)s", {"b": self.base_id}
            )
            return {r[0] for r in rows}

    def unit_material_ids(self) -> set[str]:
        with self._tx("unit_material_ids") as conn:
            rows = conn.exec_driver_sql(
                "SELECT DISTINCT material_id FROM kb_unit WHERE base_id = %(b)s",
                {"b": self.base_id},
            )
            return {r[0] for r in rows}

    def changes_version(self) -> int:
        version = self._one(
            "changes_version", "SELECT vectors_version FROM kb_index WHERE base_id = %(b)s"
        )
        if version is None:
            raise VectorStoreUnavailable("the base's index rows are gone", base_id=self.base_id)
        return int(version)
