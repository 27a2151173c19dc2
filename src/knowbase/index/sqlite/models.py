"""The SQLite store's vector sets by model id: what a model switch reads and writes (issue 15).

The ``embedding`` table is keyed by ``(model_id, embedding_text_hash)``. The store's own model
(``SqliteIndexStore.model_id``) is the one its vector lane serves and ``rebuild_material``
writes; a switch fills another model's set beside it (``put_vectors``),
swaps the base over, then drops the old set (``drop_vectors``). Writes run
under the base lock, like every writer of the file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from knowbase.errors import InvalidInput
from knowbase.index.base import MaterialInput, StoredMaterial
from knowbase.index.plan import PlannedUnit, check_vectors, plan_units
from knowbase.index.sqlite.common import batches, first, marks
from knowbase.index.sqlite.schema import utc_now, write_tx
from knowbase.index.sqlite.writes import bump, present, write_material

if TYPE_CHECKING:
    import apsw
    import numpy as np


class SqliteModelSets:
    """Vector sets by model id of one :class:`~.store.SqliteIndexStore` (its ``models``).

    The store hands it what it needs, no more: its write connection, the calling thread's
    reader, the edge that maps apsw errors and holds the store's lease, and the serving model
    (whose set :meth:`drop_vectors` refuses).
    """

    def __init__(
        self,
        *,
        writer: apsw.Connection,
        reader: Callable[[], apsw.Connection],
        edge: Callable[[str], AbstractContextManager[None]],
        serving_model_id: str,
    ) -> None:
        self._writer = writer
        self._reader = reader
        self._edge = edge
        self._serving_model_id = serving_model_id

    def vectors_for(self, hashes: Iterable[str], model_id: str) -> dict:
        """``{embedding_text_hash: float32 vector}`` of ``model_id`` for the given hashes that
        have one (export, eval, a switch's checks). Hashes without a vector are left out."""
        import numpy as np  # the store opens this for every search; only vectors need numpy

        out: dict[str, np.ndarray] = {}
        with self._edge("vectors_for"):
            conn = self._reader()
            for batch in batches(sorted(set(hashes))):
                for h, blob in conn.execute(
                    "SELECT embedding_text_hash, vector_blob FROM embedding WHERE model_id = ?"
                    f" AND embedding_text_hash IN ({marks(len(batch))})",
                    (model_id, *batch),
                ):
                    out[h] = np.frombuffer(blob, dtype="<f4").copy()
        return out

    def existing_vectors(self, model_id: str, hashes: Iterable[str]) -> set[str]:
        """The subset of ``hashes`` that has a vector of ``model_id``."""
        with self._edge("existing_vectors"):
            return present(self._reader(), model_id, hashes)

    def put_vectors(
        self,
        model_id: str,
        dims: int,
        vectors: Mapping[str, np.ndarray | Sequence[float]],
    ) -> None:
        """Store ``model_id``'s vectors (a shadow set) in one transaction; the caller holds the
        base lock. Vectors already there are kept (a body's vector never changes)."""
        if not model_id:
            raise InvalidInput("a vector set needs a model id")
        checked = check_vectors(vectors, list(vectors), dims)
        now = utc_now()
        conn = self._writer
        with self._edge("put_vectors"), write_tx(conn):
            conn.executemany(
                "INSERT OR IGNORE INTO embedding (model_id, embedding_text_hash, vector_blob,"
                " created_at) VALUES (?, ?, ?, ?)",
                [(model_id, h, v.tobytes(), now) for h, v in checked.items()],
            )

    def bodies_without_vectors(self, model_id: str, limit: int | None = None) -> dict[str, str]:
        """``{embedding_text_hash: body}`` of stored units that lack a vector of ``model_id``."""
        sql = (
            "SELECT st.embedding_text_hash, MIN(st.text) FROM search_text st"
            " WHERE st.kind = 'body' AND NOT EXISTS (SELECT 1 FROM embedding e"
            " WHERE e.model_id = ? AND e.embedding_text_hash = st.embedding_text_hash)"
            " GROUP BY st.embedding_text_hash ORDER BY st.embedding_text_hash"
        )
        args: tuple[Any, ...] = (model_id,)
        if limit is not None:
            sql, args = sql + " LIMIT ?", (model_id, limit)
        with self._edge("bodies_without_vectors"):
            return dict(self._reader().execute(sql, args).fetchall())

    def body_count(self) -> int:
        """Distinct bodies of the stored units: what a switch without re-chunking embeds."""
        with self._edge("read"):
            row = first(
                self._reader().execute(
                    "SELECT COUNT(DISTINCT embedding_text_hash) FROM search_text"
                )
            )
        return int(row[0])

    def stored_materials(self) -> list[StoredMaterial]:
        """Every material with its current content hash and title (a re-chunk's input)."""
        with self._edge("stored_materials"):
            rows = (
                self._reader()
                .execute(
                    "SELECT m.material_id, m.relative_path, m.current_content_hash,"
                    " (SELECT su.title FROM search_unit su WHERE su.material_id = m.material_id"
                    "  LIMIT 1) FROM material m ORDER BY m.material_id"
                )
                .fetchall()
            )
        return [StoredMaterial(*r) for r in rows]

    def replace_units(self, materials: Sequence[MaterialInput], model_id: str) -> None:
        """Re-chunked units for ``materials`` in **one** transaction, every body covered by
        ``model_id``'s stored vectors (EmbeddingMismatch and nothing changed otherwise); the
        caller holds the base lock. The serving model's set is not GC'd here: the caller swaps
        the base's model next and then drops the old set."""
        planned = []
        for material in materials:
            content_hash, units = plan_units(material, None, False)
            planned.append(
                (
                    material,
                    content_hash,
                    [(u.unit_id, u.chunk, u.body, u.body_hash, u.text) for u in units],
                )
            )
        conn = self._writer
        with self._edge("replace_units"), write_tx(conn):
            for material, content_hash, units in planned:
                write_material(
                    conn, material, content_hash, units, {}, model_id=model_id, vectors=True
                )
            bump(conn)

    def write_units(self, planned: Sequence[tuple[MaterialInput, str, list[PlannedUnit]]]) -> None:
        """Planned units of re-chunked materials in one transaction, without vectors and
        without :meth:`replace_units`' coverage check: for a store whose vectors live
        elsewhere (Qdrant's inner store). The caller holds the base lock."""
        conn = self._writer
        with self._edge("replace_units"), write_tx(conn):
            for material, content_hash, units in planned:
                rows = [(u.unit_id, u.chunk, u.body, u.body_hash, u.text) for u in units]
                write_material(conn, material, content_hash, rows, {}, model_id="", vectors=False)
            bump(conn)

    def drop_vectors(self, model_id: str) -> int:
        """Delete ``model_id``'s whole vector set (after a swap, or a cancelled switch's
        shadow); the number of vectors removed. Refuses the store's own serving model."""
        if model_id == self._serving_model_id:
            raise InvalidInput("refusing to drop the serving model's vectors", model_id=model_id)
        conn = self._writer
        with self._edge("drop_vectors"), write_tx(conn):
            conn.execute("DELETE FROM embedding WHERE model_id = ?", (model_id,))
            removed = conn.changes()
            bump(conn)  # cached matrices of that model must not outlive it
        return removed

    def model_ids(self) -> set[str]:
        """The models that have vectors in this file."""
        with self._edge("model_ids"):
            return {r[0] for r in self._reader().execute("SELECT DISTINCT model_id FROM embedding")}
