"""The per-base index file's schema and connections: DDL, the ``meta`` row, pragmas, sqlite-vec.

Every connection runs WAL, ``busy_timeout=5000``, ``foreign_keys=ON``, ``synchronous=NORMAL``
and loads sqlite-vec. :func:`prepare` creates the schema, checks ``meta`` (base id, schema
version) and recreates a file of another schema version. The store itself is :mod:`.store`.

Vectors are keyed by ``(model_id, embedding_text_hash)`` (DESIGN "Vectors are keyed by model
id"): during a model switch the file holds the serving model's vectors and the new model's shadow
set side by side. A file of schema version 1 (vectors keyed by hash alone) is upgraded in place,
its vectors labelled with the base's current model; a user's index is never dropped for it.

The keyword index is a contentless FTS5 table keyed by ``search_text.fts_rowid``; deletes ride on
triggers, so a cascade never leaves an FTS row behind.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import apsw

from knowbase import sqlite_files
from knowbase.errors import VectorStoreUnavailable
from knowbase.index.base import SCHEMA_VERSION

SCHEMA_DDL = """
CREATE TABLE IF NOT EXISTS meta (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  schema_version INTEGER NOT NULL,
  base_id TEXT NOT NULL,
  vectors_version INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS content (
  content_hash TEXT PRIMARY KEY,
  text TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS material (
  material_id TEXT PRIMARY KEY,
  relative_path TEXT NOT NULL UNIQUE CHECK (
    relative_path <> '' AND relative_path NOT LIKE '/%'
    AND relative_path <> '.kb' AND relative_path NOT LIKE '.kb/%'),
  current_content_hash TEXT REFERENCES content(content_hash),
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS material_content_idx ON material(current_content_hash);
CREATE TABLE IF NOT EXISTS search_unit (
  unit_id TEXT PRIMARY KEY,
  material_id TEXT NOT NULL REFERENCES material(material_id) ON DELETE CASCADE,
  content_hash TEXT NOT NULL REFERENCES content(content_hash) ON DELETE CASCADE,
  unit_type TEXT NOT NULL CHECK (unit_type = 'chunk'),
  unit_index INTEGER NOT NULL CHECK (unit_index >= 0),
  title TEXT,
  char_start INTEGER NOT NULL CHECK (char_start >= 0),
  char_end INTEGER NOT NULL CHECK (char_end >= char_start),
  locator_json TEXT,
  created_at TEXT NOT NULL,
  UNIQUE (material_id, unit_type, unit_index)
);
CREATE INDEX IF NOT EXISTS search_unit_content_idx ON search_unit(content_hash);
CREATE TABLE IF NOT EXISTS search_text (
  search_text_id TEXT PRIMARY KEY,
  target_type TEXT NOT NULL CHECK (target_type = 'search_unit'),
  target_id TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind = 'body'),
  text TEXT NOT NULL,
  embedding_text_hash TEXT NOT NULL,
  fts_rowid INTEGER UNIQUE,
  created_at TEXT NOT NULL,
  UNIQUE (target_type, target_id, kind)
);
CREATE INDEX IF NOT EXISTS search_text_hash_idx ON search_text(embedding_text_hash);
CREATE INDEX IF NOT EXISTS search_text_kind_idx ON search_text(kind);
CREATE TABLE IF NOT EXISTS embedding (
  model_id TEXT NOT NULL,
  embedding_text_hash TEXT NOT NULL,
  vector_blob BLOB NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (model_id, embedding_text_hash)
);
CREATE VIRTUAL TABLE IF NOT EXISTS search_text_fts USING fts5(
  text, content='', contentless_delete=1, tokenize='porter unicode61 remove_diacritics 2');
CREATE TRIGGER IF NOT EXISTS search_text_fts_delete AFTER DELETE ON search_text
  WHEN old.fts_rowid IS NOT NULL
BEGIN DELETE FROM search_text_fts WHERE rowid = old.fts_rowid; END;
CREATE TRIGGER IF NOT EXISTS search_text_immutable BEFORE UPDATE OF text, fts_rowid ON search_text
BEGIN SELECT RAISE(ABORT, 'search_text rows are replaced, never updated'); END;
CREATE TRIGGER IF NOT EXISTS search_unit_text_delete AFTER DELETE ON search_unit
BEGIN DELETE FROM search_text WHERE target_type = 'search_unit' AND target_id = old.unit_id; END;
"""

#: How a base whose index is lost gets one again: a new base built from its raw/ copies.
RECOVER_HINT = (
    "rebuild it from the base's stored copies: kb base restore BASE NEW_NAME "
    "(kb status shows every unavailable index)"
)

TABLES_CHILD_FIRST = ("search_text_fts", "embedding", "search_text", "search_unit", "material")
TABLES_CHILD_FIRST += ("content", "meta")


def utc_now() -> str:
    """The timestamp format of every ``created_at`` / ``updated_at`` column."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


@functools.cache
def vec_extension() -> str:
    """The sqlite-vec loadable extension's path (``sqlite_vec.loadable_path()``), found without
    importing the package: its ``__init__`` imports numpy, which a BM25-only search never
    needs (issue 39 item 5)."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise VectorStoreUnavailable("the sqlite-vec package is not installed")
    return str(Path(spec.submodule_search_locations[0]) / "vec0")


def connect(path: Path, *, create: bool) -> apsw.Connection:
    """A connection with the house pragmas and sqlite-vec loaded (DESIGN "SQLite connections")."""
    flags = apsw.SQLITE_OPEN_READWRITE | (apsw.SQLITE_OPEN_CREATE if create else 0)
    sqlite_files.opening(path)  # before the connection: see knowbase.sqlite_files
    conn = apsw.Connection(str(path), flags=flags)
    conn.execute("PRAGMA busy_timeout=5000")
    conn.execute("PRAGMA journal_mode=WAL").fetchall()
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.enable_load_extension(True)
    conn.load_extension(vec_extension())
    conn.enable_load_extension(False)
    return conn


@contextlib.contextmanager
def write_tx(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; anything raised rolls back.

    Not apsw's ``with conn``: that is a SAVEPOINT, which takes the write lock only at the first
    write, so a check-then-write could race another process.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        # SQLite may already have rolled the whole transaction back (SQLITE_FULL, IOERR,
        # BUSY, NOMEM do): a ROLLBACK then fails and would hide the error that caused it.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def prepare(
    conn: apsw.Connection, base_id: str, model_id: str | None = None, *, create: bool = True
) -> tuple[bool, str]:
    """Create or check the schema and the ``meta`` row; ``(was_reset, meta.created_at)``.

    A file of another base, or one that is no knowbase index, raises VectorStoreUnavailable; so
    does a file without its ``meta`` row unless ``create`` (a new base): an index that was
    expected is never filled with an empty schema. A file of an upgradable version
    (:data:`UPGRADES`) is upgraded in place, its vectors labelled ``model_id`` (the base's
    current model); any other version is dropped and recreated (``was_reset``).
    """
    was_reset = False
    with write_tx(conn):
        names = {
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            if not r[0].startswith("sqlite_")
        }
        if "meta" in names:
            # apsw has no description for a statement that returned no row: ask the table.
            columns = [r[1] for r in conn.execute("PRAGMA table_info(meta)")]
            rows = conn.execute("SELECT * FROM meta WHERE id = 1").fetchall()  # drained
            if rows:
                meta = dict(zip(columns, rows[0], strict=True))
                if meta.get("base_id") != base_id:
                    raise VectorStoreUnavailable(
                        "this index belongs to another base; refusing to mount it",
                        hint=RECOVER_HINT,
                        base_id=base_id,
                        index_base_id=meta.get("base_id"),
                    )
                version = meta.get("schema_version")
                while version in UPGRADES:
                    version = UPGRADES[version](conn, model_id)
                if version != SCHEMA_VERSION:
                    drop_all(conn)
                    was_reset = True
            elif not create:
                raise VectorStoreUnavailable(
                    "the base's index file has lost its meta row; it is not recreated empty",
                    hint=RECOVER_HINT,
                    base_id=base_id,
                )
        elif names:
            raise VectorStoreUnavailable("not a knowbase index file", base_id=base_id)
        elif not create:
            raise VectorStoreUnavailable(
                "the base's index file holds no index (no tables); it is not recreated empty",
                hint=RECOVER_HINT,
                base_id=base_id,
            )
        conn.execute(SCHEMA_DDL)
        now = utc_now()
        conn.execute(
            "INSERT OR IGNORE INTO meta (id, schema_version, base_id, vectors_version,"
            " created_at, updated_at) VALUES (1, ?, ?, 0, ?, ?)",
            (SCHEMA_VERSION, base_id, now, now),
        )
        created_at = conn.execute("SELECT created_at FROM meta WHERE id = 1").fetchall()[0][0]
    return was_reset, created_at


def _upgrade_v1(conn: apsw.Connection, model_id: str | None) -> int:
    """v1 → v2: key ``embedding`` by model id, labelling every stored vector with ``model_id``.

    A BM25-only base has no vectors worth keeping (none are written for it); any found are
    labelled ``''`` and never served. Runs inside :func:`prepare`'s write transaction, so a
    crash leaves the v1 file as it was.
    """
    columns = {r[1] for r in conn.execute("PRAGMA table_info(embedding)")}
    if columns and "model_id" not in columns:
        conn.execute("ALTER TABLE embedding RENAME TO embedding_v1")
        conn.execute(SCHEMA_DDL)  # the v2 embedding table (everything else exists already)
        conn.execute(
            "INSERT INTO embedding (model_id, embedding_text_hash, vector_blob, created_at)"
            " SELECT ?, embedding_text_hash, vector_blob, created_at FROM embedding_v1",
            (model_id or "",),
        )
        conn.execute("DROP TABLE embedding_v1")
    conn.execute("UPDATE meta SET schema_version = 2 WHERE id = 1")
    return 2


#: ``{from_version: upgrade}``: run in the open's transaction; each returns the new version.
UPGRADES = {1: _upgrade_v1}


def drop_all(conn: apsw.Connection) -> None:
    """Drop every table, trigger and view (inside the caller's write transaction)."""
    # FK checks wait for COMMIT, by which time every table is gone.
    conn.execute("PRAGMA defer_foreign_keys=ON")
    for name in TABLES_CHILD_FIRST:
        conn.execute(f'DROP TABLE IF EXISTS "{name}"')
    for kind in ("trigger", "view", "table"):
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type=? AND name NOT LIKE 'sqlite_%'", (kind,)
        ).fetchall()
        for (name,) in rows:
            # FTS shadow tables vanish with their virtual table; skip those already gone.
            conn.execute(f'DROP {kind.upper()} IF EXISTS "{name}"')
