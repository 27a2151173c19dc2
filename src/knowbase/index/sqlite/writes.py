"""The SQLite store's writes: a material's units (§3 steps 0–8), deletes, GC and the version
bump. Module functions on a connection inside the caller's write transaction; the caller
(:class:`~.sqlite.SqliteIndexStore`) holds the base lock.

The keyword text is computed in Python and inserted here; FTS deletes ride on triggers, so a
cascade never leaves an FTS row behind.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import apsw

from knowbase.errors import Conflict, EmbeddingMismatch
from knowbase.index.base import MaterialInput
from knowbase.index.fts_query import keyword_text
from knowbase.index.sqlite.common import batches, first, marks
from knowbase.index.sqlite.schema import utc_now, write_tx
from knowbase.units import hashing

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


def present(conn: apsw.Connection, model_id: str, hashes: Iterable[str]) -> set[str]:
    """The subset of ``hashes`` that has a vector of ``model_id`` (batches of 500)."""
    found: set[str] = set()
    for batch in batches(sorted(set(hashes))):
        found.update(
            r[0]
            for r in conn.execute(
                "SELECT embedding_text_hash FROM embedding WHERE model_id = ?"
                f" AND embedding_text_hash IN ({marks(len(batch))})",
                (model_id, *batch),
            )
        )
    return found


def check_coverage(
    conn: apsw.Connection, model_id: str, needed: Sequence[str], material_id: str
) -> None:
    """EmbeddingMismatch (rolling the caller's transaction back) unless every body has a
    vector of ``model_id``."""
    found = present(conn, model_id, needed)
    missing = [h for h in needed if h not in found]
    if missing:
        raise EmbeddingMismatch(
            f"{len(missing)} chunk(s) have no embedding; nothing was changed",
            material_id=material_id,
            missing=missing[:10],
        )


def bump(conn: apsw.Connection) -> None:
    """Bump ``meta.vectors_version`` (cached matrices of an older version are stale)."""
    conn.execute(
        "UPDATE meta SET vectors_version = vectors_version + 1, updated_at = ? WHERE id = 1",
        (utc_now(),),
    )


def gc(conn: apsw.Connection, model_id: str) -> None:
    """Drop ``model_id``'s vectors and contents no unit or material uses any more."""
    conn.execute(_GC_EMBEDDING, (model_id,))
    for sql in _GC_SQL:
        conn.execute(sql)


def write_material(
    conn: apsw.Connection,
    material: MaterialInput,
    content_hash: str,
    units: list[tuple[Any, ...]],
    blobs: Mapping[str, bytes],
    *,
    model_id: str,
    vectors: bool,
) -> bool:
    """Steps 0–8 inside the caller's write transaction; True when old rows may need GC.
    Coverage is checked against ``model_id``'s vectors when ``vectors``."""
    text = material.content_text
    needed = sorted({u[3] for u in units})
    now = utc_now()
    row = first(
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
    other = first(
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
    insert_units(conn, material, content_hash, units, now)
    conn.executemany(
        "INSERT OR IGNORE INTO embedding (model_id, embedding_text_hash, vector_blob,"
        " created_at) VALUES (?, ?, ?, ?)",
        [(model_id, h, b, now) for h, b in blobs.items()],
    )
    if vectors:
        check_coverage(conn, model_id, needed, material.material_id)
    conn.execute(
        "UPDATE material SET current_content_hash = ?, updated_at = ? WHERE material_id = ?",
        (content_hash, now, material.material_id),
    )
    # A new material replaced nothing: skipping the GC there keeps an import linear (the
    # content GC scans every content row; once per new document made a 100k-file import
    # quadratic).
    return bool(deleted or (prior is not None and prior != content_hash))


def insert_units(
    conn: apsw.Connection,
    material: MaterialInput,
    content_hash: str,
    units: list[tuple[Any, ...]],
    now: str,
) -> None:
    rowid = int(first(conn.execute("SELECT COALESCE(MAX(fts_rowid), 0) FROM search_text"))[0])
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


def delete_materials(
    conn: apsw.Connection,
    material_ids: Iterable[str],
    model_id: str,
) -> None:
    """Delete materials, one short transaction each, then one GC."""
    last_yield = time.monotonic()
    for mid in material_ids:
        with write_tx(conn):
            conn.execute(
                "DELETE FROM search_text WHERE target_type = 'search_unit' AND target_id"
                " IN (SELECT unit_id FROM search_unit WHERE material_id = ?)",
                (mid,),
            )
            conn.execute("DELETE FROM material WHERE material_id = ?", (mid,))
            if conn.changes():
                bump(conn)
        if time.monotonic() - last_yield > 0.05:
            time.sleep(0)  # let readers and heartbeats in on long deletes
            last_yield = time.monotonic()
    with write_tx(conn):
        gc(conn, model_id)
