"""The default per-base index: one SQLite file (apsw + sqlite-vec + FTS5), §3.

Connections (DESIGN "SQLite connections"): one writer connection, used by callers that hold the
base lock, and one reader connection per thread; every connection runs WAL,
``busy_timeout=5000``, ``foreign_keys=ON``, ``synchronous=NORMAL`` and loads sqlite-vec. The DDL,
the ``meta`` checks and the connection setup live in :mod:`.schema`.

The store owns the connections and the caches and composes its parts, each a module of its own:
the writes (:mod:`.writes`), the keyword lane (:mod:`.keyword`), the vector lane
(:mod:`.vectors`) and the vector sets by model id (:mod:`.models`). The vector lane's modules
load numpy, so the store imports them where a vector is searched: a BM25-only search (a cold
``kb search``) never loads numpy (issue 39 item 5).

apsw's exceptions are mapped to :mod:`knowbase.errors` at this edge only
(:func:`.common.map_error`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw

from knowbase.errors import InvalidInput, VectorStoreUnavailable
from knowbase.index.base import LaneHit, MaterialInput, SearchHit, UnitRecord
from knowbase.index.fts_query import build_keyword_query
from knowbase.index.lease import Leases
from knowbase.index.plan import check_vectors, plan_units
from knowbase.index.sqlite import keyword as sqlite_keyword
from knowbase.index.sqlite import upkeep as sqlite_upkeep
from knowbase.index.sqlite import writes as sqlite_writes
from knowbase.index.sqlite.common import (
    Within,
    first,
    hits,
    map_error,
    open_connection,
    unit_records,
)
from knowbase.index.sqlite.models import SqliteModelSets
from knowbase.index.sqlite.schema import connect, write_tx
from knowbase.index.sqlite.upkeep import RECLAIM_MIN_BYTES, RECLAIM_MIN_RATIO
from knowbase.index.vector import DEFAULT_MIN_ROWS

if TYPE_CHECKING:
    import numpy as np

    from knowbase.index.vector.matrix import VectorMatrix
    from knowbase.index.vector.quantized import BigLane, Lane

log = logging.getLogger(__name__)


class SqliteIndexStore:
    """The IndexStore protocol on one SQLite file. Open with :meth:`open`."""

    writes_batches = True  # rebuild_materials: many materials in one transaction
    quantized_min_rows: int = DEFAULT_MIN_ROWS  # the big-base lane's threshold (live rows)
    _big: BigLane | None = None  # the big-base lane's state, once asked for

    def __init__(
        self,
        path: Path,
        conn: apsw.Connection,
        *,
        base_id: str,
        dims: int | None,
        key: str,
        model_id: str | None = None,
    ) -> None:
        self.path = path
        self.base_id = base_id
        self.dims = dims
        self.model_id = model_id or ""  # whose vectors this store writes and searches
        self.was_reset = False
        self._writer = conn
        self._cache_key = key
        self._local = threading.local()
        self._readers: list[apsw.Connection] = []
        self._lock = threading.Lock()
        self.leases = Leases(self._close_connections, what=str(path))
        self.models = SqliteModelSets(
            writer=conn, reader=self._reader, edge=self._edge, serving_model_id=self.model_id
        )

    # --- lifecycle -----------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: Path,
        *,
        base_id: str,
        dims: int | None,
        create: bool = True,
        model_id: str | None = None,
    ) -> SqliteIndexStore:
        """Mount the base's index, creating it when ``create``; its vector lane is ``model_id``'s.

        Raises VectorStoreUnavailable when the file is missing (``create=False``), corrupt, or
        belongs to another base. A file of another schema version is dropped and recreated;
        ``was_reset`` then tells the caller the base must be reindexed.
        """
        path = Path(path)
        if dims is not None and dims <= 0:
            raise InvalidInput("dims must be positive", dims=dims)
        conn, was_reset, created_at = open_connection(path, base_id, model_id, create=create)
        # The matrix cache key names the model: two models' matrices of one file never mix.
        key = f"{path.resolve()}|{created_at}|{model_id or ''}"
        store = cls(path, conn, base_id=base_id, dims=dims, key=key, model_id=model_id)
        store.was_reset = was_reset
        if was_reset:
            log.warning("index %s had another schema version; recreated, reindex needed", path)
        return store

    def close(self) -> None:
        """Close the writer and every reader connection — now, or when the last holder of a
        lease (a call in flight, ``Runtime.lease``) lets go. Idempotent."""
        self.leases.close()

    def hold(self) -> contextlib.AbstractContextManager[None]:
        """Keep the store open across several calls (see :mod:`.lease`)."""
        return self.leases.hold()

    def _close_connections(self) -> None:
        with self._lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
            self._writer.close()

    def __enter__(self) -> SqliteIndexStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _edge(self, op: str) -> Iterator[None]:
        with self.leases.hold():
            try:
                yield
            except apsw.Error as exc:
                raise map_error(exc, op, self.path) from exc

    def _reader(self) -> apsw.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            with self._lock:
                if self.leases.closed:
                    raise VectorStoreUnavailable("the index store is closed", path=str(self.path))
                conn = connect(self.path, create=False)
                self._readers.append(conn)
            self._local.conn = conn
        return conn

    def _one(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        with self._edge("read"):
            row = first(self._reader().execute(sql, args))
        return row[0] if row else None

    # --- writes (caller holds the base lock) --------------------------------------------
    def rebuild_material(
        self, material: MaterialInput, embeddings: Mapping[str, np.ndarray | Sequence[float]]
    ) -> None:
        """Replace one material's units in one ``BEGIN IMMEDIATE`` transaction (§3 steps 0–8).

        ``embeddings`` maps ``embedding_text_hash`` (sha256 of the body) to a vector. A vector
        base needs every body covered (by this mapping or by vectors already stored), otherwise
        EmbeddingMismatch is raised and the previous state of the material stays intact.
        """
        content_hash, planned = plan_units(material, self.dims, bool(embeddings))
        units = [(u.unit_id, u.chunk, u.body, u.body_hash, u.text) for u in planned]
        needed = sorted({u[3] for u in units})
        blobs: dict[str, bytes] = {}
        if self.dims is not None:
            checked = check_vectors(embeddings, needed, self.dims)
            blobs = {h: v.tobytes() for h, v in checked.items()}
        conn = self._writer
        with self._edge("rebuild_material"), write_tx(conn):
            changed = sqlite_writes.write_material(
                conn,
                material,
                content_hash,
                units,
                blobs,
                model_id=self.model_id,
                vectors=self.dims is not None,
            )
            if changed:
                sqlite_writes.gc(conn, self.model_id)
            sqlite_writes.bump(conn)

    def rebuild_materials(
        self, materials: Sequence[MaterialInput], embeddings: Mapping[str, Any]
    ) -> list[Exception | None]:
        """Many materials in one transaction, each one's error (:mod:`.batch`)."""
        from knowbase.index.sqlite.batch import rebuild_materials

        with self._edge("rebuild_materials"):
            return rebuild_materials(
                self._writer, materials, embeddings, dims=self.dims, model_id=self.model_id
            )

    def delete_materials(self, material_ids: Iterable[str]) -> None:
        """Delete materials, one short transaction each, then one GC."""
        with self._edge("delete_materials"):
            sqlite_writes.delete_materials(self._writer, material_ids, self.model_id)

    def reclaim(
        self, *, min_ratio: float = RECLAIM_MIN_RATIO, min_bytes: int = RECLAIM_MIN_BYTES
    ) -> None:
        """Best-effort space reclaim after a subtree delete (§3 "Reclaim"); never raises.

        Checkpoint; only when the free list is ≥ ``min_ratio`` of the pages **and** ≥
        ``min_bytes``, FTS ``optimize``, checkpoint, VACUUM, checkpoint.
        """
        try:
            self.leases.acquire()
        except VectorStoreUnavailable:
            return
        try:
            sqlite_upkeep.reclaim(self._writer, self.path, min_ratio=min_ratio, min_bytes=min_bytes)
        finally:
            self.leases.release()

    # --- reads -----------------------------------------------------------------------------
    def existing_embedding_hashes(self, hashes: Iterable[str]) -> set[str]:
        """The subset of ``hashes`` that already has a vector of this store's model."""
        with self._edge("existing_embedding_hashes"):
            return sqlite_writes.present(self._reader(), self.model_id, hashes)

    def stored_vectors(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """``{embedding_text_hash: vector}`` of the serving model (float32, exactly as stored)
        for the ``hashes`` that have one; an export reads vectors here, nothing is re-embedded."""
        if self.dims is None or not self.model_id:
            return {}
        return self.models.vectors_for(hashes, self.model_id)

    def keyword_lane(
        self, query: str, limit: int, *, within: frozenset[str] | None = None
    ) -> list[LaneHit]:
        """The BM25 lane on the absolute scale of :mod:`.keyword_scale` (its LIKE fallback:
        :func:`.keyword_scale.like_score`). Equal scores in Concept ID, then unit order (the
        same after an export and import, where unit ids change).

        ``within`` restricts the hits to those materials inside the ranking query, before the
        limit (search filters).
        """
        kq = build_keyword_query(query)
        if limit <= 0 or kq.mode == "none" or (within is not None and not within):
            return []
        with self._edge("keyword_search"):
            return sqlite_keyword.lane(self._reader(), kq, limit, Within(within))

    def keyword_search(
        self, query: str, limit: int, *, within: frozenset[str] | None = None
    ) -> list[SearchHit]:
        """:meth:`keyword_lane` with text, Concept ID and locator per hit."""
        return self.hits_for([(h.unit_id, h.score) for h in self.keyword_lane(
            query, limit, within=within)])  # fmt: skip

    def vector_lane(
        self, vector: np.ndarray, limit: int, *, within: frozenset[str] | None = None
    ) -> list[LaneHit]:
        """Cosine top-``limit`` from :meth:`serving_lane` (score = cosine similarity), among
        the rows of ``within``'s materials when it is given."""
        if self.dims is None or limit <= 0 or (within is not None and not within):
            return []
        from knowbase.index.sqlite import vectors as sqlite_vectors

        q = sqlite_vectors.query_vector(vector, self.dims)
        matrix = self.vector_matrix()
        with self._edge("vector_search"):
            conn = self._reader()
            mask = None if within is None else sqlite_vectors.row_mask(conn, matrix, within)
            if mask is not None and not mask.any():
                return []
            pairs = self.serving_lane(matrix).top_k(q, limit, mask=mask)
            owner = sqlite_vectors.owners_at(conn, matrix, [uid for uid, _ in pairs])
        # A unit deleted since the matrix was read is simply skipped.
        return [LaneHit(uid, owner[uid], score) for uid, score in pairs if uid in owner]

    def vector_search(
        self, vector: np.ndarray, limit: int, *, within: frozenset[str] | None = None
    ) -> list[SearchHit]:
        """:meth:`vector_lane` with text, Concept ID and locator per hit."""
        return self.hits_for([(h.unit_id, h.score) for h in self.vector_lane(
            vector, limit, within=within)])  # fmt: skip

    def serving_lane(self, matrix: VectorMatrix | None = None) -> Lane:
        """The lane serving ``matrix`` (default: the current version): the exact matrix, or
        above ``quantized_min_rows`` live rows its faiss index (:mod:`..vector.quantized`),
        patched as the matrix is. Its ``top_k`` takes a row mask over ``matrix``."""
        from knowbase.index.vector.matrix import CACHE
        from knowbase.index.vector.quantized import BigLane

        matrix = matrix if matrix is not None else self.vector_matrix()
        big = self._big
        if big is None:
            with CACHE.build_lock(f"{self._cache_key}|lane"):
                big = self._big = self._big or BigLane()
        return big.serve(matrix, min_rows=self.quantized_min_rows)

    def vector_lane_info(self) -> dict[str, Any]:
        """The lane in use and its memory (``kb status``); loads nothing."""
        if self.dims is None:
            return {"lane": "none"}
        from knowbase.index.vector.matrix import CACHE
        from knowbase.index.vector.quantized import describe as describe_lane

        rows = int(self._one("SELECT count(*) FROM search_unit"))
        return describe_lane(
            self._big,
            CACHE.get(self._cache_key),
            rows=rows,
            dims=self.dims,
            min_rows=self.quantized_min_rows,
        )

    def vector_search_sql(
        self, vector: np.ndarray, limit: int, *, within: frozenset[str] | None = None
    ) -> list[SearchHit]:
        """The same lane as an exact ``vec_distance_cosine`` scan in SQL (tests, bench)."""
        if self.dims is None or limit <= 0 or (within is not None and not within):
            return []
        from knowbase.index.sqlite import vectors as sqlite_vectors

        q = sqlite_vectors.query_vector(vector, self.dims)
        with self._edge("vector_search_sql"):
            return sqlite_vectors.sql_scan(
                self._reader(), q, limit, model_id=self.model_id, within=within
            )

    def vector_matrix(self) -> VectorMatrix:
        """This base's matrix at the current ``vectors_version``, loading or patching it."""
        if self.dims is None:
            raise InvalidInput("a BM25-only index has no vector lane", path=str(self.path))
        from knowbase.index.sqlite import vectors as sqlite_vectors
        from knowbase.index.vector.matrix import CACHE

        key = self._cache_key
        cached = CACHE.get(key)
        if cached is not None and cached.version == self.changes_version():
            return cached
        with CACHE.build_lock(key), self._edge("vector_matrix"):
            cached = CACHE.get(key)
            matrix = sqlite_vectors.current(
                self._reader(), cached, dims=self.dims, model_id=self.model_id
            )
            if matrix is not cached:
                CACHE.put(key, matrix)
            return matrix

    def hits_for(self, pairs: Sequence[tuple[str, float]]) -> list[SearchHit]:
        """Full hits for ``(unit_id, score)`` pairs, in their order (the hits a search shows,
        an external vector lane); units gone meanwhile are skipped."""
        if not pairs:
            return []
        with self._edge("vector_search"):
            return hits(self._reader(), pairs)

    def material_path(self, material_id: str) -> str | None:
        return self._one("SELECT relative_path FROM material WHERE material_id = ?", (material_id,))

    def material_by_path(self, relative_path: str) -> str | None:
        """The material id whose Concept ID is exactly ``relative_path``."""
        return self._one(
            "SELECT material_id FROM material WHERE relative_path = ?", (relative_path,)
        )

    def content_text(self, material_id: str) -> str | None:
        return self._one(
            "SELECT c.text FROM material m JOIN content c"
            " ON c.content_hash = m.current_content_hash WHERE m.material_id = ?",
            (material_id,),
        )

    def list_units(self, material_id: str) -> list[UnitRecord]:
        """The material's units in unit_index order, with their bodies."""
        with self._edge("list_units"):
            return unit_records(self._reader(), material_id)

    def material_ids(self) -> set[str]:
        with self._edge("material_ids"):
            return {r[0] for r in self._reader().execute("SELECT material_id FROM material")}

    def unit_material_ids(self) -> set[str]:
        """Material ids that own at least one unit (orphan checks against the catalog)."""
        with self._edge("unit_material_ids"):
            rows = self._reader().execute("SELECT DISTINCT material_id FROM search_unit")
            return {r[0] for r in rows}

    def changes_version(self) -> int:
        """``meta.vectors_version``: bumped by every transaction that changes units."""
        return int(self._one("SELECT vectors_version FROM meta WHERE id = 1"))

    def integrity_check(self) -> str:
        """``"ok"``, or what SQLite's and FTS5's integrity checks (and the FTS row sync) found."""
        with (
            self._edge("integrity_check"),
            contextlib.closing(connect(self.path, create=False)) as conn,
        ):
            problems = sqlite_upkeep.integrity_problems(conn)
        return "\n".join(problems) or "ok"

    def for_model(self, model_id: str, dims: int) -> SqliteIndexStore:
        """Another handle on the same file whose vector lane serves ``model_id`` (a shadow set:
        ``kb eval --model shadow``). The caller closes it."""
        return SqliteIndexStore.open(
            self.path, base_id=self.base_id, dims=dims, create=False, model_id=model_id
        )
