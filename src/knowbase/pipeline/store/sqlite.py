"""The default per-base index: one SQLite file (apsw + sqlite-vec + FTS5), §3.

Connections (DESIGN "SQLite connections"): one writer connection, used by callers that hold the
base lock, and one reader connection per thread; every connection runs WAL,
``busy_timeout=5000``, ``foreign_keys=ON``, ``synchronous=NORMAL`` and loads sqlite-vec. The DDL,
the ``meta`` checks and the connection setup live in :mod:`.sqlite_schema`.

The keyword index is a contentless FTS5 table keyed by ``search_text.fts_rowid`` holding the
CJK-bigram keyword text (:mod:`.fts_query`). Inserts are done here (the keyword text is computed
in Python); deletes ride on triggers, so a cascade never leaves an FTS row behind. Always join
``st.fts_rowid = fts.rowid``: VACUUM may renumber implicit rowids, never ``fts_rowid``.

apsw's exceptions are mapped to :mod:`knowbase.errors` at this edge only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from knowbase.errors import (
    Conflict,
    DiskFull,
    EmbeddingMismatch,
    InvalidInput,
    KnowbaseError,
    Unavailable,
    VectorStoreUnavailable,
)
from knowbase.pipeline.store import hashing
from knowbase.pipeline.store.base import LaneHit, MaterialInput, SearchHit, UnitRecord
from knowbase.pipeline.store.fts_query import build_keyword_query, fts_quote, keyword_text
from knowbase.pipeline.store.keyword_scale import absolute, idf, like_score, scale_idf
from knowbase.pipeline.store.lease import Leases
from knowbase.pipeline.store.plan import check_vectors, plan_units
from knowbase.pipeline.store.sqlite_models import SqliteModelSets, check_coverage, present
from knowbase.pipeline.store.sqlite_schema import (
    RECOVER_HINT,
    connect,
    prepare,
    utc_now,
    write_tx,
)
from knowbase.pipeline.store.vector_matrix import CACHE, VectorMatrix
from knowbase.pipeline.store.vector_quantized import DEFAULT_MIN_ROWS, BigLane, Lane
from knowbase.pipeline.store.vector_quantized import describe as describe_lane
from knowbase.sqlite_files import header_problem

log = logging.getLogger(__name__)

BATCH = 500  # coverage checks and IN lists, as §3
CANDIDATES = 4  # keyword candidates per hit asked, re-ordered by the absolute score
RECLAIM_MIN_RATIO = 0.2
RECLAIM_MIN_BYTES = 8 << 20

_HIT_COLUMNS = """su.unit_id, su.material_id, m.relative_path, su.unit_index, su.char_start,
  su.char_end, st.text, su.title, su.locator_json"""
_HIT_JOINS = """JOIN search_unit su ON su.unit_id = st.target_id AND st.target_type = 'search_unit'
  JOIN material m ON m.material_id = su.material_id"""

# The embedding GC touches the serving model's set only: a model switch's shadow set covers
# bodies of its own chunking and is dropped as a whole (``drop_vectors``) after the swap.
_GC_EMBEDDING = """DELETE FROM embedding WHERE model_id = ? AND NOT EXISTS (SELECT 1 FROM
  search_text st WHERE st.embedding_text_hash = embedding.embedding_text_hash)"""
_GC_SQL = (
    """DELETE FROM content WHERE
         NOT EXISTS (SELECT 1 FROM material m WHERE m.current_content_hash = content.content_hash)
         AND NOT EXISTS (SELECT 1 FROM search_unit su
                         WHERE su.content_hash = content.content_hash)""",
)


def _map_error(exc: apsw.Error, op: str, path: Path) -> KnowbaseError:
    """One place that turns apsw's exceptions into ours.

    A ``CantOpenError``/``IOError`` is marked ``transient``: a file briefly out of reach (a
    network mount reconnecting, a ``-wal`` file in the way) opens on a later try, so the runtime
    retries before it fails the base for good.
    """
    details: dict[str, Any] = {"op": op, "path": str(path), "sqlite_error": type(exc).__name__}
    if isinstance(exc, apsw.CantOpenError | apsw.IOError):
        details["transient"] = True
    if isinstance(exc, apsw.FullError):
        return DiskFull(f"no space left for the index ({op}): {exc}", **details)
    if isinstance(exc, apsw.BusyError | apsw.LockedError):
        return Unavailable(f"index is busy ({op}); retry shortly", **details)
    if isinstance(exc, apsw.CorruptError | apsw.NotADBError | apsw.CantOpenError | apsw.IOError):
        return VectorStoreUnavailable(
            f"index file cannot be used ({op}): {exc}",
            hint=RECOVER_HINT,
            **details,
        )
    if isinstance(exc, apsw.ConstraintError):
        return InvalidInput(f"index constraint failed ({op}): {exc}", **details)
    return KnowbaseError(f"index error ({op}): {exc}", **details)


def _check_file(path: Path, base_id: str) -> None:
    """Refuse an index file that is missing, empty or no SQLite database before SQLite opens it
    (SQLite would make an empty file a fresh, empty index). Missing and empty are marked
    ``transient``: a base being created in another process has its file for a moment before
    its schema, and the runtime's retries outlast that."""
    problem = header_problem(path)
    if problem is None:
        return
    transient = {"transient": True} if problem in ("is missing", "is empty (0 bytes)") else {}
    raise VectorStoreUnavailable(
        f"the base's index file {problem}; it is not recreated empty",
        hint=RECOVER_HINT,
        path=str(path),
        base_id=base_id,
        **transient,
    )


def _hit(row: Sequence[Any], score: float) -> SearchHit:
    uid, mid, path, idx, start, end, text, title, loc = row
    locator = json.loads(loc) if loc else {}
    return SearchHit(uid, mid, path, idx, start, end, text, score, title, locator)


def _first(cursor: apsw.Cursor) -> Any:
    """The first row or None, draining the cursor: a pending statement pins a read snapshot
    (WAL) and blocks DROP TABLE on its connection."""
    rows = cursor.fetchall()
    return rows[0] if rows else None


def _batches(items: Sequence[str], size: int = BATCH) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _fts_row_count(conn: apsw.Connection) -> int:
    """FTS5's own N (the first varint of its averages record, ``_data`` row 1), as its bm25()
    reads it; ``count(*)`` of the table when the record is absent."""
    row = _first(conn.execute("SELECT block FROM search_text_fts_data WHERE id = 1"))
    if row is not None and row[0]:
        value = 0
        for byte in bytes(row[0])[:8]:  # SQLite varint, big-endian 7 bits a byte
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                return value
    return int(_first(conn.execute("SELECT count(*) FROM search_text_fts"))[0])


def _marks(n: int) -> str:
    return ",".join("?" * n)


class _Within:
    """A material scope as SQL: ``sql`` (empty, or an ``AND`` on ``su.material_id``) and its
    ``args``. The ids travel as one JSON array (``json_each``): one parameter however many."""

    __slots__ = ("args", "sql")

    def __init__(self, within: frozenset[str] | None) -> None:
        if within is None:
            self.sql, self.args = "", ()
        else:
            self.sql = " AND su.material_id IN (SELECT value FROM json_each(?))"
            self.args = (json.dumps(list(within)),)


class SqliteIndexStore(SqliteModelSets):
    """The IndexStore protocol on one SQLite file. Open with :meth:`open`."""

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
        if not create:
            _check_file(path, base_id)
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        conn = None
        try:
            conn = connect(path, create=create)
            was_reset, created_at = prepare(conn, base_id, model_id, create=create)
        except apsw.Error as exc:
            if conn is not None:
                conn.close()
            raise _map_error(exc, "open", path) from exc
        except BaseException:
            if conn is not None:
                conn.close()
            raise
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
                raise _map_error(exc, op, self.path) from exc

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

    def _bump(self, conn: apsw.Connection) -> None:
        conn.execute(
            "UPDATE meta SET vectors_version = vectors_version + 1, updated_at = ? WHERE id = 1",
            (utc_now(),),
        )

    def _gc(self, conn: apsw.Connection) -> None:
        conn.execute(_GC_EMBEDDING, (self.model_id,))
        for sql in _GC_SQL:
            conn.execute(sql)

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
        blobs = self._encode(embeddings, needed) if self.dims is not None else {}
        conn = self._writer
        with self._edge("rebuild_material"), write_tx(conn):
            changed = self._write_material(
                conn, material, content_hash, units, blobs, model_id=self.model_id
            )
            if changed:
                self._gc(conn)
            self._bump(conn)

    def _write_material(
        self,
        conn: apsw.Connection,
        material: MaterialInput,
        content_hash: str,
        units: list[tuple[Any, ...]],
        blobs: Mapping[str, bytes],
        *,
        model_id: str,
        vectors: bool | None = None,
    ) -> bool:
        """Steps 0–8 inside the caller's write transaction; True when old rows may need GC.
        Coverage is checked against ``model_id``'s vectors when ``vectors`` (default: on a
        vector base)."""
        text = material.content_text
        needed = sorted({u[3] for u in units})
        now = utc_now()
        row = _first(
            conn.execute(
                "SELECT current_content_hash FROM material WHERE material_id = ?",
                (material.material_id,),
            )
        )
        prior = row[0] if row else None
        conn.execute(
            "INSERT OR IGNORE INTO content (content_hash, text, created_at) VALUES (?, ?, ?)",
            (content_hash, text, now),
        )
        other = _first(
            conn.execute(
                "SELECT material_id FROM material WHERE relative_path = ? AND material_id <> ?",
                (material.relative_path, material.material_id),
            )
        )
        if other:
            raise Conflict(
                "another material already has this relative path",
                relative_path=material.relative_path,
                material_id=other[0],
            )
        conn.execute(
            "INSERT INTO material (material_id, relative_path, current_content_hash,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT(material_id)"
            " DO UPDATE SET relative_path = excluded.relative_path,"
            " updated_at = excluded.updated_at",
            (material.material_id, material.relative_path, content_hash, now, now),
        )
        conn.execute(
            "DELETE FROM search_text WHERE target_type = 'search_unit' AND target_id IN"
            " (SELECT unit_id FROM search_unit WHERE material_id = ?)",
            (material.material_id,),
        )
        conn.execute("DELETE FROM search_unit WHERE material_id = ?", (material.material_id,))
        deleted = conn.changes()
        self._insert_units(conn, material, content_hash, units, now)
        conn.executemany(
            "INSERT OR IGNORE INTO embedding (model_id, embedding_text_hash, vector_blob,"
            " created_at) VALUES (?, ?, ?, ?)",
            [(model_id, h, b, now) for h, b in blobs.items()],
        )
        if self.dims is not None if vectors is None else vectors:
            check_coverage(conn, model_id, needed, material.material_id)
        conn.execute(
            "UPDATE material SET current_content_hash = ?, updated_at = ?"
            " WHERE material_id = ?",
            (content_hash, now, material.material_id),
        )
        # A new material replaced nothing: skipping the GC there keeps an import linear (the
        # content GC scans every content row; once per new document made a 100k-file import
        # quadratic).
        return bool(deleted or (prior is not None and prior != content_hash))

    def _encode(
        self, embeddings: Mapping[str, np.ndarray | Sequence[float]], needed: Sequence[str]
    ) -> dict[str, bytes]:
        """Little-endian float32 blobs of the supplied vectors this material uses."""
        assert self.dims is not None
        return {h: v.tobytes() for h, v in check_vectors(embeddings, needed, self.dims).items()}

    @staticmethod
    def _insert_units(
        conn: apsw.Connection,
        material: MaterialInput,
        content_hash: str,
        units: list[tuple[Any, ...]],
        now: str,
    ) -> None:
        rowid = int(_first(conn.execute("SELECT COALESCE(MAX(fts_rowid), 0) FROM search_text"))[0])
        for uid, chunk, body, body_hash, *text in units:
            rowid += 1
            loc = json.dumps(chunk.locator, ensure_ascii=False) if chunk.locator else None
            conn.execute(
                "INSERT INTO search_unit (unit_id, material_id, content_hash, unit_type,"
                " unit_index, title, char_start, char_end, locator_json, created_at)"
                " VALUES (?, ?, ?, 'chunk', ?, ?, ?, ?, ?, ?)",
                (
                    uid,
                    material.material_id,
                    content_hash,
                    chunk.unit_index,
                    material.title,
                    chunk.char_start,
                    chunk.char_end,
                    loc,
                    now,
                ),
            )
            conn.execute(
                "INSERT INTO search_text (search_text_id, target_type, target_id, kind, text,"
                " embedding_text_hash, fts_rowid, created_at)"
                " VALUES (?, 'search_unit', ?, 'body', ?, ?, ?, ?)",
                (hashing.search_text_id(uid), uid, body, body_hash, rowid, now),
            )
            conn.execute(
                "INSERT INTO search_text_fts (rowid, text) VALUES (?, ?)",
                (rowid, keyword_text(text[0] if text else body)),
            )

    def delete_materials(self, material_ids: Iterable[str]) -> None:
        """Delete materials, one short transaction each, then one GC."""
        conn = self._writer
        last_yield = time.monotonic()
        with self._edge("delete_materials"):
            for mid in material_ids:
                with write_tx(conn):
                    conn.execute(
                        "DELETE FROM search_text WHERE target_type = 'search_unit' AND target_id"
                        " IN (SELECT unit_id FROM search_unit WHERE material_id = ?)",
                        (mid,),
                    )
                    conn.execute("DELETE FROM material WHERE material_id = ?", (mid,))
                    if conn.changes():
                        self._bump(conn)
                if time.monotonic() - last_yield > 0.05:
                    time.sleep(0)  # let readers and heartbeats in on long deletes
                    last_yield = time.monotonic()
            with write_tx(conn):
                self._gc(conn)

    def reclaim(
        self, *, min_ratio: float = RECLAIM_MIN_RATIO, min_bytes: int = RECLAIM_MIN_BYTES
    ) -> None:
        """Best-effort space reclaim after a subtree delete (§3 "Reclaim"); never raises.

        Checkpoint; only when the free list is ≥ ``min_ratio`` of the pages **and** ≥
        ``min_bytes``, FTS ``optimize``, checkpoint, VACUUM, checkpoint.
        """
        conn = self._writer
        try:
            self.leases.acquire()
        except VectorStoreUnavailable:
            return
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            free = conn.execute("PRAGMA freelist_count").fetchall()[0][0]
            pages = conn.execute("PRAGMA page_count").fetchall()[0][0]
            size = conn.execute("PRAGMA page_size").fetchall()[0][0]
            if not pages or free / pages < min_ratio or free * size < min_bytes:
                return
            conn.execute("INSERT INTO search_text_fts(search_text_fts) VALUES ('optimize')")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            log.info("reclaimed %d free pages in %s", free, self.path)
        except (apsw.CorruptError, apsw.NotADBError) as exc:
            log.error("reclaim of %s found a corrupt index: %s", self.path, exc)
        except Exception as exc:  # best effort by contract
            log.warning("reclaim of %s failed: %s", self.path, exc)
        finally:
            self.leases.release()

    # --- reads -----------------------------------------------------------------------------
    def _one(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        with self._edge("read"):
            row = _first(self._reader().execute(sql, args))
        return row[0] if row else None

    def existing_embedding_hashes(self, hashes: Iterable[str]) -> set[str]:
        """The subset of ``hashes`` that already has a vector of this store's model."""
        with self._edge("existing_embedding_hashes"):
            return present(self._reader(), self.model_id, hashes)

    def stored_vectors(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """``{embedding_text_hash: vector}`` of the serving model (float32, exactly as stored)
        for the ``hashes`` that have one; an export reads vectors here, nothing is re-embedded."""
        if self.dims is None or not self.model_id:
            return {}
        return self.vectors_for(hashes, self.model_id)

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
        scope = _Within(within)
        with self._edge("keyword_search"):
            conn = self._reader()
            if kq.mode == "like":
                where = " AND ".join("st.text LIKE ? ESCAPE '\\'" for _ in kq.like_terms)
                rows = conn.execute(
                    f"SELECT su.unit_id, su.material_id, length(st.text) FROM search_text st"
                    " JOIN search_unit su ON su.unit_id = st.target_id"
                    " JOIN material m ON m.material_id = su.material_id"
                    f" WHERE st.kind = 'body' AND {where}{scope.sql}"
                    " ORDER BY length(st.text), m.relative_path, su.unit_index LIMIT ?",
                    (*kq.like_terms, *scope.args, limit),
                ).fetchall()
                return [LaneHit(u, m, like_score(n)) for u, m, n in rows]
            # FTS5 ranks a window of candidates with its own idf; they are then ordered by the
            # absolute score (whose idf never floors), so a lane's order is its scores' order.
            window = CANDIDATES * limit + 1
            with conn:  # one snapshot for the ranking and its scale
                rows = self._match(conn, kq.match or "", kq.filters, window, scope)
                if not rows and kq.filters:
                    rows = self._match(conn, kq.match or "", (), window, scope)
                scores = self._absolute(conn, kq.terms, [r[3] for r in rows]) if rows else {}
        rows.sort(key=lambda r: (-scores[r[3]], r[4], r[5]))
        return [LaneHit(u, m, scores[rowid]) for u, m, _, rowid, *_ in rows[:limit]]

    @staticmethod
    def _absolute(
        conn: apsw.Connection, terms: Sequence[str], rowids: Sequence[int]
    ) -> dict[int, float]:
        """The absolute keyword score of each FTS row (:mod:`.keyword_scale`): each term's
        BM25 alone (a one-phrase query, FTS5's idf over the whole index) gives its ``tfpart``
        in the row; the terms are then weighed by :func:`.keyword_scale.scale_idf`."""
        n_rows = _fts_row_count(conn)
        parts: dict[int, list[tuple[float, float]]] = {r: [] for r in rowids}
        for term in terms:
            phrase = fts_quote(term)
            (n_hit,) = _first(
                conn.execute(
                    "SELECT count(*) FROM search_text_fts WHERE search_text_fts MATCH ?",
                    (phrase,),
                )
            )
            weight, fts_idf = scale_idf(n_rows, int(n_hit)), idf(n_rows, int(n_hit))
            found: dict[int, float] = {}
            for i in range(0, len(rowids), BATCH):
                batch = rowids[i : i + BATCH]
                found.update(
                    conn.execute(
                        "SELECT rowid, bm25(search_text_fts) FROM search_text_fts"
                        f" WHERE search_text_fts MATCH ? AND rowid IN ({_marks(len(batch))})",
                        (phrase, *batch),
                    ).fetchall()
                )
            for rowid, pairs in parts.items():
                pairs.append((weight, -found[rowid] / fts_idf if rowid in found else 0.0))
        return {rowid: absolute(pairs) for rowid, pairs in parts.items()}

    def keyword_search(
        self, query: str, limit: int, *, within: frozenset[str] | None = None
    ) -> list[SearchHit]:
        """:meth:`keyword_lane` with text, Concept ID and locator per hit."""
        return self._hits_for([(h.unit_id, h.score) for h in self.keyword_lane(
            query, limit, within=within)])  # fmt: skip

    @staticmethod
    def _match(
        conn: apsw.Connection, match: str, filters: Sequence[str], limit: int, scope: _Within
    ) -> list[Any]:
        """``(unit_id, material_id, bm25, fts rowid, Concept ID, unit index)`` rows, best
        (lowest) first, ties by Concept ID and unit index. The caller holds a read
        transaction."""
        if filters or scope.sql:
            # LIKE filters and the material scope need the row before the limit: one joined
            # query, ranked among the rows that pass.
            extra = "".join(" AND st.text LIKE ? ESCAPE '\\'" for _ in filters)
            return conn.execute(
                "SELECT su.unit_id, su.material_id, bm25(search_text_fts) AS r,"
                " search_text_fts.rowid, m.relative_path, su.unit_index FROM search_text_fts"
                " JOIN search_text st ON st.fts_rowid = search_text_fts.rowid"
                " JOIN search_unit su ON su.unit_id = st.target_id"
                " JOIN material m ON m.material_id = su.material_id"
                f" WHERE search_text_fts MATCH ?{extra}{scope.sql}"
                " ORDER BY r, m.relative_path, su.unit_index LIMIT ?",
                (match, *filters, *scope.args, limit),
            ).fetchall()
        # Rank inside FTS5 first, then join only the winners: joining every match before the
        # sort cost ~3x the ranking itself (a 2-word query over 10k chunks: 2.3 of 3.0 ms).
        want = 4 * limit + 1  # room for the usual ties in one pass
        while True:
            ranked = conn.execute(
                "SELECT rowid, bm25(search_text_fts) AS r FROM search_text_fts"
                " WHERE search_text_fts MATCH ? ORDER BY r LIMIT ?",
                (match, want),
            ).fetchall()
            # Equal scores are common (short chunks, one hit each). When a tie spans the
            # cut, widen until it ends, so the tie-break below sees every tied row and picks
            # what the joined query would.
            if len(ranked) < want or ranked[-1][1] != ranked[limit - 1][1]:
                break
            want *= 4
        if len(ranked) > limit:
            cut = ranked[limit - 1][1]
            ranked = [r for r in ranked if r[1] <= cut]
        score = dict(ranked)
        rows: list[Any] = []
        rowids = list(score)
        for i in range(0, len(rowids), BATCH):
            batch = rowids[i : i + BATCH]
            rows.extend(
                conn.execute(
                    # no target_type test (the CHECK makes it constant): with it the
                    # planner scans the (target_type, ...) index instead of fts_rowid's
                    "SELECT su.unit_id, su.material_id, st.fts_rowid, m.relative_path,"
                    " su.unit_index FROM search_text st"
                    " JOIN search_unit su ON su.unit_id = st.target_id"
                    " JOIN material m ON m.material_id = su.material_id"
                    f" WHERE st.fts_rowid IN ({_marks(len(batch))})",
                    batch,
                ).fetchall()
            )
        rows.sort(key=lambda r: (score[r[2]], r[3], r[4]))
        return [(u, m, score[r], r, path, idx) for u, m, r, path, idx in rows[:limit]]

    def _query_vector(self, vector: np.ndarray | Sequence[float]) -> np.ndarray:
        q = np.asarray(vector, dtype="<f4").ravel()
        if q.shape[0] != self.dims:
            raise EmbeddingMismatch(
                "query vector width does not match the base", dims=self.dims, got=q.shape[0]
            )
        return q

    def vector_lane(
        self, vector: np.ndarray, limit: int, *, within: frozenset[str] | None = None
    ) -> list[LaneHit]:
        """Cosine top-``limit`` from :meth:`serving_lane` (score = cosine similarity), among
        the rows of ``within``'s materials when it is given."""
        if self.dims is None or limit <= 0 or (within is not None and not within):
            return []
        q = self._query_vector(vector)
        matrix = self.vector_matrix()
        with self._edge("vector_search"):
            conn = self._reader()
            mask = None if within is None else self._row_mask(conn, matrix, within)
            if mask is not None and not mask.any():
                return []
            pairs = self.serving_lane(matrix).top_k(q, limit, mask=mask)
            owner: dict[str, str] = {}
            ids = [uid for uid, _ in pairs]
            for batch in _batches(ids):
                owner.update(
                    conn.execute(
                        "SELECT unit_id, material_id FROM search_unit"
                        f" WHERE unit_id IN ({_marks(len(batch))})",
                        tuple(batch),
                    ).fetchall()
                )
        # A unit deleted since the matrix was read is simply skipped.
        return [LaneHit(uid, owner[uid], score) for uid, score in pairs if uid in owner]

    @staticmethod
    def _row_mask(
        conn: apsw.Connection, matrix: VectorMatrix, within: frozenset[str]
    ) -> np.ndarray:
        """The matrix rows of the units of ``within``'s materials (units newer than the
        matrix are not in it; units deleted since have no row)."""
        mask = np.zeros(len(matrix.ids), dtype=bool)
        rows = matrix.rows
        scope = _Within(within)
        found = conn.execute(
            f"SELECT su.unit_id FROM search_unit su WHERE 1{scope.sql}", scope.args
        ).fetchall()
        index = [i for (uid,) in found if (i := rows.get(uid)) is not None]
        mask[index] = True
        return mask

    def vector_search(
        self, vector: np.ndarray, limit: int, *, within: frozenset[str] | None = None
    ) -> list[SearchHit]:
        """:meth:`vector_lane` with text, Concept ID and locator per hit."""
        return self._hits_for([(h.unit_id, h.score) for h in self.vector_lane(
            vector, limit, within=within)])  # fmt: skip

    def serving_lane(self, matrix: VectorMatrix | None = None) -> Lane:
        """The lane serving ``matrix`` (default: the current version): the exact matrix, or
        above ``quantized_min_rows`` live rows its faiss index (:mod:`.vector_quantized`),
        patched as the matrix is. Its ``top_k`` takes a row mask over ``matrix``."""
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
        q = self._query_vector(vector)
        scope = _Within(within)
        with self._edge("vector_search_sql"):
            rows = (
                self._reader()
                .execute(
                    f"SELECT {_HIT_COLUMNS}, vec_distance_cosine(e.vector_blob, ?) AS dist"
                    f" FROM search_text st {_HIT_JOINS}"
                    " JOIN embedding e ON e.embedding_text_hash = st.embedding_text_hash"
                    " AND e.model_id = ?"
                    f" WHERE st.kind = 'body' AND dist IS NOT NULL{scope.sql}"
                    " ORDER BY dist, su.unit_id LIMIT ?",
                    (q.tobytes(), self.model_id, *scope.args, limit),
                )
                .fetchall()
            )
        return [_hit(r[:-1], 1.0 - float(r[-1])) for r in rows]

    def vector_matrix(self) -> VectorMatrix:
        """This base's matrix at the current ``vectors_version``, loading or patching it."""
        if self.dims is None:
            raise InvalidInput("a BM25-only index has no vector lane", path=str(self.path))
        key = self._cache_key
        cached = CACHE.get(key)
        if cached is not None and cached.version == self.changes_version():
            return cached
        with CACHE.build_lock(key), self._edge("vector_matrix"):
            cached = CACHE.get(key)
            conn = self._reader()
            # One read transaction: the version label and the rows come from the same snapshot.
            conn.execute("BEGIN")
            try:
                version = conn.execute("SELECT vectors_version FROM meta").fetchall()[0][0]
                if cached is not None and cached.version == version:
                    return cached
                matrix = self._load(conn, cached, version)
            finally:
                conn.execute("COMMIT")
            CACHE.put(key, matrix)
            return matrix

    def _load(
        self, conn: apsw.Connection, cached: VectorMatrix | None, version: int
    ) -> VectorMatrix:
        select = (
            "SELECT su.unit_id, e.vector_blob FROM search_unit su"
            " JOIN search_text st ON st.target_type = 'search_unit'"
            " AND st.target_id = su.unit_id AND st.kind = 'body'"
            " JOIN embedding e ON e.embedding_text_hash = st.embedding_text_hash"
            " AND e.model_id = ?"
        )
        model = (self.model_id,)
        assert self.dims is not None
        if cached is not None and cached.dims == self.dims:
            current = {r[0] for r in conn.execute("SELECT unit_id FROM search_unit")}
            added = sorted(current - cached.known)
            removed = cached.known - current
            # A patch costs what changed (the matrix appends and marks rows dead), so it is
            # never worse than a full load, however much changed.
            rows: list[tuple[str, bytes]] = []
            for batch in _batches(added):
                rows.extend(
                    conn.execute(
                        f"{select} WHERE su.unit_id IN ({_marks(len(batch))})", (*model, *batch)
                    )
                )
            return cached.patched(rows, removed, version=version)
        return VectorMatrix.from_rows(conn.execute(select, model), dims=self.dims, version=version)

    def hits_for(self, pairs: Sequence[tuple[str, float]]) -> list[SearchHit]:
        """Full hits for ``(unit_id, score)`` pairs, in their order (the hits a search shows,
        an external vector lane); units gone meanwhile are skipped."""
        return self._hits_for(pairs)

    def _hits_for(self, pairs: Sequence[tuple[str, float]]) -> list[SearchHit]:
        if not pairs:
            return []
        ids = [uid for uid, _ in pairs]
        found: dict[str, Sequence[Any]] = {}
        with self._edge("vector_search"):
            conn = self._reader()
            for batch in _batches(ids):
                for r in conn.execute(
                    f"SELECT {_HIT_COLUMNS} FROM search_text st {_HIT_JOINS}"
                    f" WHERE st.kind = 'body' AND su.unit_id IN ({_marks(len(batch))})",
                    tuple(batch),
                ):
                    found[r[0]] = r
        # A unit deleted since the matrix was read is simply skipped.
        return [_hit(found[uid], score) for uid, score in pairs if uid in found]

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
            rows = (
                self._reader()
                .execute(
                    # CROSS JOIN keeps search_unit (by material_id) the outer loop: left to
                    # itself the planner walked search_text's kind index, every row of the
                    # base (0.23 s per call at 100k chunks; now 0.1 ms).
                    "SELECT su.unit_id, su.unit_index, su.char_start, su.char_end, st.text,"
                    " su.locator_json FROM search_unit su CROSS JOIN search_text st"
                    " ON st.target_type = 'search_unit' AND st.target_id = su.unit_id"
                    " AND st.kind = 'body' WHERE su.material_id = ? ORDER BY su.unit_index",
                    (material_id,),
                )
                .fetchall()
            )
        return [
            UnitRecord(uid, idx, s, e, text, json.loads(loc) if loc else {})
            for uid, idx, s, e, text, loc in rows
        ]

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
        problems: list[str] = []
        # A fresh connection: FTS5's check on a long-lived reader can see a stale structure
        # record after many rebuilds and report a false "corruption found".
        with (
            self._edge("integrity_check"),
            contextlib.closing(connect(self.path, create=False)) as conn,
        ):
            rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
            if rows != ["ok"]:
                problems.extend(rows)
            try:
                conn.execute(
                    "INSERT INTO search_text_fts(search_text_fts, rank)"
                    " VALUES ('integrity-check', 0)"
                )
            except apsw.Error as exc:
                problems.append(f"fts: {exc}")
            fts = {r[0] for r in conn.execute("SELECT rowid FROM search_text_fts")}
            st = {r[0] for r in conn.execute("SELECT fts_rowid FROM search_text")}
            if fts != st:
                problems.append(f"fts rows out of sync: {len(fts ^ st)} differ")
        return "\n".join(problems) or "ok"
