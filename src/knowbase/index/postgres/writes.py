"""The postgres store's writes: a material's units and vectors, deletes, the GC of what only
deleted rows used, and the ``kb_index`` totals. Every write runs in the caller's transaction
after :meth:`PostgresWriter.lock_base`, so writers of one base queue on its ``kb_index`` row
even across machines.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sqlalchemy.engine import Connection

from knowbase.errors import Conflict, EmbeddingMismatch, VectorStoreUnavailable
from knowbase.index.base import MaterialInput
from knowbase.index.postgres.keyword import keyword_words
from knowbase.index.postgres.sql import vector_literal


class PostgresWriter:
    """The write statements of one base; ``vec_table`` and ``model_id`` name the serving
    model's set (the one the GC trims)."""

    def __init__(self, base_id: str, vec_table: str | None, model_id: str) -> None:
        self.base_id = base_id
        self.vec_table = vec_table
        self.model_id = model_id

    def lock_base(self, conn: Connection) -> None:
        row = conn.exec_driver_sql(
            "SELECT 1 FROM kb_index WHERE base_id = %(b)s FOR UPDATE", {"b": self.base_id}
        ).first()
        if row is None:
            raise VectorStoreUnavailable("the base's index rows are gone", base_id=self.base_id)

    def unit_rows(
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

    def write_material(
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
            self.check_coverage(conn, needed, mid, model_id, vec_table)
        hashes = {r[0] for r in old} if gc else set()
        contents = {r[1] for r in old} | ({prior[0]} if prior else set())
        self.gc(conn, hashes, contents - {content_hash})
        self.account(conn, len(rows) - len(old), sum(r["n"] for r in rows) - sum(r[2] for r in old))

    def check_coverage(
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

    def gc(self, conn: Connection, hashes: set[str], contents: set[str]) -> None:
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

    def account(self, conn: Connection, units: int, tokens: int) -> None:
        conn.exec_driver_sql(
            "UPDATE kb_index SET vectors_version = vectors_version + 1, updated_at = now(),"
            " unit_count = unit_count + %(u)s, token_count = token_count + %(t)s"
            " WHERE base_id = %(b)s",
            {"b": self.base_id, "u": units, "t": tokens},
        )

    def delete_materials(self, conn: Connection, ids: list[str]) -> None:
        """Delete the materials and what only they used (base row locked)."""
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
        self.gc(conn, {r[0] for r in old}, {r[1] for r in old} | {r[0] for r in gone})
        self.account(conn, -len(old), -sum(r[2] for r in old))
