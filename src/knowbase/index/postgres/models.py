"""The postgres store's vector sets by model id (see :mod:`..sqlite.models` for the contract).

A model's vectors sit in the ``kb_vec_<dims>`` table of its width, rows keyed by
``(base_id, model_id, embedding_text_hash)``; a set of another width lives in another table, so
a lookup by model id alone asks every ``kb_vec`` table (there is one per width in use).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from knowbase.errors import InvalidInput
from knowbase.index.base import MaterialInput, StoredMaterial
from knowbase.index.plan import PlannedUnit, check_vectors, plan_units
from knowbase.index.postgres.sql import ensure_vector_table, vector_literal, vector_tables

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from knowbase.index.postgres.writes import PostgresWriter


class PostgresModelSets:
    """Vector sets by model id of one :class:`~.store.PostgresIndexStore` (its ``models``).

    The store hands it what it needs, no more: its transaction edge (holds the store's lease,
    maps driver errors), the base's id, its writer of unit rows, and the serving model (whose
    set :meth:`drop_vectors` refuses).
    """

    def __init__(
        self,
        *,
        tx: Callable[[str], AbstractContextManager[Connection]],
        base_id: str,
        writes: PostgresWriter,
        serving_model_id: str,
    ) -> None:
        self._tx = tx
        self._base_id = base_id
        self._writes = writes
        self._serving_model_id = serving_model_id

    def vectors_for(self, hashes: Iterable[str], model_id: str) -> dict:
        """``{embedding_text_hash: float32 vector}`` of ``model_id`` for those that have one."""
        wanted = sorted(set(hashes))
        out: dict[str, np.ndarray] = {}
        if not wanted:
            return out
        with self._tx("vectors_for") as conn:
            for table in vector_tables(conn):
                for h, v in conn.exec_driver_sql(
                    # real[]: float32 as stored, no decimal round trip
                    f"SELECT embedding_text_hash, embedding::real[] FROM {table}"
                    " WHERE base_id = %(b)s AND model_id = %(mo)s"
                    " AND embedding_text_hash = ANY(%(h)s)",
                    {"b": self._base_id, "mo": model_id, "h": wanted},
                ):
                    out[h] = np.asarray(v, dtype="<f4")
        return out

    def existing_vectors(self, model_id: str, hashes: Iterable[str]) -> set[str]:
        wanted = sorted(set(hashes))
        if not wanted:
            return set()
        found: set[str] = set()
        with self._tx("existing_vectors") as conn:
            for table in vector_tables(conn):
                found.update(
                    r[0]
                    for r in conn.exec_driver_sql(
                        f"SELECT embedding_text_hash FROM {table} WHERE base_id = %(b)s"
                        " AND model_id = %(mo)s AND embedding_text_hash = ANY(%(h)s)",
                        {"b": self._base_id, "mo": model_id, "h": wanted},
                    )
                )
        return found

    def put_vectors(
        self,
        model_id: str,
        dims: int,
        vectors: Mapping[str, np.ndarray | Sequence[float]],
    ) -> None:
        """Store ``model_id``'s vectors in its width's table (made on first use)."""
        if not model_id:
            raise InvalidInput("a vector set needs a model id")
        checked = check_vectors(vectors, list(vectors), dims)
        if not checked:
            return
        with self._tx("put_vectors") as conn:
            table = ensure_vector_table(conn, self._base_id, dims)
            conn.exec_driver_sql(
                f"INSERT INTO {table} (base_id, model_id, embedding_text_hash, embedding)"
                " VALUES (%(b)s, %(mo)s, %(h)s, %(v)s::vector) ON CONFLICT DO NOTHING",
                [
                    {"b": self._base_id, "mo": model_id, "h": h, "v": vector_literal(v)}
                    for h, v in checked.items()
                ],
            )

    def bodies_without_vectors(self, model_id: str, limit: int | None = None) -> dict[str, str]:
        with self._tx("bodies_without_vectors") as conn:
            missing = "".join(
                f" AND NOT EXISTS (SELECT 1 FROM {t} v WHERE v.base_id = u.base_id"
                " AND v.model_id = %(mo)s AND v.embedding_text_hash = u.embedding_text_hash)"
                for t in vector_tables(conn)
            )
            rows = conn.exec_driver_sql(
                "SELECT u.embedding_text_hash, MIN(u.body) FROM kb_unit u"
                f" WHERE u.base_id = %(b)s{missing} GROUP BY u.embedding_text_hash"
                " ORDER BY u.embedding_text_hash" + (" LIMIT %(k)s" if limit is not None else ""),
                {"b": self._base_id, "mo": model_id, "k": limit},
            ).all()
        return {h: body for h, body in rows}

    def body_count(self) -> int:
        return int(
            self._one(
                "body_count",
                "SELECT COUNT(DISTINCT embedding_text_hash) FROM kb_unit WHERE base_id = %(b)s",
            )
        )

    def _one(self, op: str, sql: str) -> Any:
        with self._tx(op) as conn:
            row = conn.exec_driver_sql(sql, {"b": self._base_id}).first()
        return row[0] if row else None

    def stored_materials(self) -> list[StoredMaterial]:
        with self._tx("stored_materials") as conn:
            rows = conn.exec_driver_sql(
                "SELECT m.material_id, m.relative_path, m.current_content_hash,"
                " (SELECT u.title FROM kb_unit u WHERE u.base_id = m.base_id"
                "  AND u.material_id = m.material_id LIMIT 1)"
                " FROM kb_material m WHERE m.base_id = %(b)s ORDER BY m.material_id",
                {"b": self._base_id},
            ).all()
        return [StoredMaterial(*r) for r in rows]

    def replace_units(self, materials: Sequence[MaterialInput], model_id: str) -> None:
        """Re-chunked units in one transaction, covered by ``model_id``'s stored vectors."""
        planned = []
        for material in materials:
            content_hash, units = plan_units(material, None, False)
            planned.append(
                (
                    material,
                    content_hash,
                    self._writes.unit_rows(material, content_hash, units),
                )
            )
        with self._tx("replace_units") as conn:
            self._writes.lock_base(conn)
            tables = [
                t
                for t in vector_tables(conn)
                if conn.exec_driver_sql(
                    f"SELECT 1 FROM {t} WHERE base_id = %(b)s AND model_id = %(mo)s LIMIT 1",
                    {"b": self._base_id, "mo": model_id},
                ).first()
            ]
            if not tables:
                raise InvalidInput("the new model has no vectors yet", model_id=model_id)
            for material, content_hash, rows in planned:
                self._writes.write_material(
                    conn, material, content_hash, rows, {}, model_id, tables[0], gc=False
                )

    def write_units(self, planned: Sequence[tuple[MaterialInput, str, list[PlannedUnit]]]) -> None:
        """Planned units of re-chunked materials in one transaction, without vectors and
        without :meth:`replace_units`' coverage check: for a store whose vectors live
        elsewhere (Qdrant's inner store). The caller holds the base lock."""
        pg_rows = [
            (material, content_hash, self._writes.unit_rows(material, content_hash, units))
            for material, content_hash, units in planned
        ]
        with self._tx("replace_units") as conn:
            self._writes.lock_base(conn)
            for material, content_hash, rows in pg_rows:
                self._writes.write_material(
                    conn, material, content_hash, rows, {}, "", None, gc=False
                )

    def drop_vectors(self, model_id: str) -> int:
        if model_id == self._serving_model_id:
            raise InvalidInput("refusing to drop the serving model's vectors", model_id=model_id)
        removed = 0
        with self._tx("drop_vectors") as conn:
            for table in vector_tables(conn):
                removed += conn.exec_driver_sql(
                    f"DELETE FROM {table} WHERE base_id = %(b)s AND model_id = %(mo)s",
                    {"b": self._base_id, "mo": model_id},
                ).rowcount
        return removed

    def model_ids(self) -> set[str]:
        out: set[str] = set()
        with self._tx("model_ids") as conn:
            for table in vector_tables(conn):
                out.update(
                    r[0]
                    for r in conn.exec_driver_sql(
                        f"SELECT DISTINCT model_id FROM {table} WHERE base_id = %(b)s",
                        {"b": self._base_id},
                    )
                )
        return out
