"""The index in the catalog's PostgreSQL database: pgvector HNSW + full-text search (§3).

Tables (migration ``0002s``): ``kb_index`` (one row per base: versions and the BM25 totals),
``kb_content``, ``kb_material``, ``kb_unit`` (one row per search unit: its body, the hash of the
body's embedding and the keyword ``tsvector``), all keyed by base id and deleted with the base.
Vectors: ``kb_vec_<dims>`` with HNSW (:mod:`.sql`). The store composes its parts: the
writes (:mod:`.writes`), the keyword lane (the SQLite lane's keyword text and FTS5's
BM25 recomputed in SQL, :mod:`.keyword`), the vector lane (:mod:`.vectors`)
and the vector sets by model id (:mod:`.models`).

Every write is one transaction that first locks the base's ``kb_index`` row, so writers of one
base queue there even across machines. Without the ``vector`` extension a vector base cannot be
opened (``vector_store_unavailable``, ``reason = vector_extension_missing``); BM25-only bases work.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from knowbase.errors import InvalidInput, VectorStoreUnavailable
from knowbase.index.base import LaneHit, MaterialInput, SearchHit, UnitRecord
from knowbase.index.fts_query import build_keyword_query
from knowbase.index.lease import Leases
from knowbase.index.plan import check_vectors, plan_units
from knowbase.index.postgres import vectors as postgres_vectors
from knowbase.index.postgres.keyword import keyword_rows, keyword_words
from knowbase.index.postgres.models import PostgresModelSets
from knowbase.index.postgres.sql import (
    HIT,
    JOIN,
    LANE,
    SCHEMA_VERSION,
    ef_search_for,
    ensure_vector_table,
    hits,
    map_error,
    visible_join,
)
from knowbase.index.postgres.writes import PostgresWriter

__all__ = ["PostgresIndexStore", "ef_search_for", "keyword_words"]

log = logging.getLogger(__name__)


class PostgresIndexStore:
    """The IndexStore protocol over the ``kb_*`` tables. Open with :meth:`open`."""

    writes_batches = False  # no rebuild_materials: each material in its own transaction

    def __init__(
        self,
        engine: Engine,
        *,
        base_id: str,
        dims: int | None,
        visible_statuses: Sequence[str] = (),
        model_id: str | None = None,
    ) -> None:
        self.engine = engine
        self.base_id = base_id
        self.dims = dims
        self.model_id = model_id or ""  # whose vectors this store writes and searches
        self.was_reset = False
        # the catalog's searchable statuses; empty: the lanes see every unit (no join)
        self.visible_statuses = tuple(visible_statuses)
        self._visible_sql = visible_join(self.visible_statuses)
        self.vec_table = f"kb_vec_{dims}" if dims is not None else None
        self.leases = Leases(lambda: None, what=f"postgres index of {base_id}")
        self.writes = PostgresWriter(base_id, self.vec_table, self.model_id)
        self.models = PostgresModelSets(
            tx=self._tx, base_id=base_id, writes=self.writes, serving_model_id=self.model_id
        )

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
        visible_statuses: Sequence[str] = (),
        model_id: str | None = None,
    ) -> PostgresIndexStore:
        """Mount the base's index rows, creating them when ``create``.

        VectorStoreUnavailable when the rows are missing (``create=False``), or when a vector
        base meets a server without the ``vector`` extension (``reason`` says so).
        """
        if dims is not None and dims <= 0:
            raise InvalidInput("dims must be positive", dims=dims)
        store = cls(
            engine,
            base_id=base_id,
            dims=dims,
            visible_statuses=visible_statuses,
            model_id=model_id,
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

    # --- writes ----------------------------------------------------------------------------
    def rebuild_material(
        self, material: MaterialInput, embeddings: Mapping[str, np.ndarray | Sequence[float]]
    ) -> None:
        """Replace one material's units in one transaction; see SqliteIndexStore's contract."""
        content_hash, units = plan_units(material, self.dims, bool(embeddings))
        needed = sorted({u.body_hash for u in units})
        vectors = check_vectors(embeddings, needed, self.dims) if self.dims is not None else {}
        rows = self.writes.unit_rows(material, content_hash, units)
        with self._tx("rebuild_material") as conn:
            self.writes.lock_base(conn)
            self.writes.write_material(
                conn, material, content_hash, rows, vectors, self.model_id, self.vec_table
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
        return self.models.vectors_for(hashes, self.model_id)

    def delete_materials(self, material_ids: Iterable[str]) -> None:
        """Delete the materials and what only they used, in one transaction."""
        ids = sorted(set(material_ids))
        if not ids:
            return
        with self._tx("delete_materials") as conn:
            self.writes.lock_base(conn)
            self.writes.delete_materials(conn, ids)

    def reclaim(self) -> None:
        """Nothing to do: autovacuum reclaims PostgreSQL's dead rows."""

    # --- reads -----------------------------------------------------------------------------
    def _visible(self) -> str:
        return self._visible_sql

    def keyword_lane(
        self, query: str, limit: int, *, within: frozenset[str] | None = None
    ) -> list[LaneHit]:
        """FTS5-equivalent BM25 or the LIKE fallback on :mod:`.keyword_scale`'s absolute scale,
        ties by Concept ID and unit order, among ``within``'s materials when given; see
        :mod:`.keyword`."""
        return [LaneHit(u, m, float(s)) for u, m, s in self._keyword(query, limit, LANE, within)]

    def keyword_search(
        self, query: str, limit: int, *, within: frozenset[str] | None = None
    ) -> list[SearchHit]:
        """:meth:`keyword_lane` with text, Concept ID and locator per hit."""
        return hits(self._keyword(query, limit, HIT, within))

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
        return hits(self._vector(vector, limit, HIT, within))

    def _vector(
        self, vector: np.ndarray, limit: int, columns: str, within: frozenset[str] | None
    ) -> list[Any]:
        if self.dims is None or limit <= 0 or (within is not None and not within):
            return []
        q = postgres_vectors.query_vector(vector, self.dims)
        if q is None:
            return []  # matches nothing, as the SQLite lane
        assert self.vec_table is not None
        with self._tx("vector_search") as conn:
            return postgres_vectors.vector_rows(
                conn,
                q,
                limit,
                base_id=self.base_id,
                model_id=self.model_id,
                vec_table=self.vec_table,
                columns=columns,
                visible=self._visible(),
                within=within,
            )

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
        found = {h.unit_id: h for h in hits(rows)}
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

    def for_model(self, model_id: str, dims: int) -> PostgresIndexStore:
        """Another handle on the same base whose vector lane serves ``model_id``."""
        return PostgresIndexStore.open(
            self.engine,
            base_id=self.base_id,
            dims=dims,
            create=False,
            visible_statuses=self.visible_statuses,
            model_id=model_id,
        )
