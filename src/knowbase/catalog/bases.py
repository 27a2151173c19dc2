"""Base repository: plain functions over a connection (the caller owns the transaction)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog.db import now_ms
from knowbase.catalog.models import Base
from knowbase.catalog.schema import knowledge_base as kb_t
from knowbase.errors import Conflict, InvalidInput, NotFound
from knowbase.ids import new_base_id
from knowbase.pipeline.store import backends

UPDATABLE = {
    "name",
    "rerank_model_id",
    "file_processor_id",
    "chunk_size",
    "chunk_overlap",
    "chunk_strategy",
    "chunk_separator",
    "threshold",
    "document_count",
    "allow_local_urls",
    "sync_deletes",
    "url_max_age",
    "fusion",
    "fusion_alpha",
    "rrf_k",
}

#: What ``file_processor_id`` may hold (the catalog CHECK, migration 0006c): OCR, or image
#: captions from a vision model ``caption:<profile>:<model>`` (profile in config.toml).
_PROCESSOR = re.compile(r"tesseract|caption:[^:\s]+:\S[^\r\n]{0,200}")


def name_key(name: str) -> str:
    return name.strip().casefold()


def validate_settings(values: dict[str, Any]) -> None:
    """The zod rules of §1.1 on top of the table CHECKs, as clear InvalidInput errors."""
    size = values.get("chunk_size")
    overlap = values.get("chunk_overlap")
    if size is not None and size < 1:
        raise InvalidInput("chunk_size must be a positive number of tokens", field="chunk_size")
    if overlap is not None and overlap < 0:
        raise InvalidInput("chunk_overlap must be 0 or more", field="chunk_overlap")
    if size is not None and overlap is not None and overlap >= size:
        raise InvalidInput("chunk_overlap must be smaller than chunk_size", field="chunk_overlap")
    strategy = values.get("chunk_strategy")
    if strategy is not None and strategy not in ("structured", "delimiter"):
        raise InvalidInput("chunk_strategy must be 'structured' or 'delimiter'")
    if strategy == "delimiter" and not values.get("chunk_separator"):
        raise InvalidInput("a separator is required with the delimiter strategy")
    threshold = values.get("threshold")
    if threshold is not None and not 0 <= threshold <= 1:
        raise InvalidInput("threshold must be between 0 and 1", field="threshold")
    count = values.get("document_count")
    if count is not None and count < 1:
        raise InvalidInput("document_count must be positive", field="document_count")
    max_age = values.get("url_max_age")
    if max_age is not None and max_age < 0:
        raise InvalidInput("url_max_age must be 0 or more seconds", field="url_max_age")
    processor = values.get("file_processor_id")
    if processor is not None and not _PROCESSOR.fullmatch(processor):
        raise InvalidInput(
            "file_processor_id must be 'tesseract', 'caption:<profile>:<model>' or empty",
            field="file_processor_id",
        )
    from knowbase.query.fusion import validate as validate_fusion

    validate_fusion(values.get("fusion"), values.get("fusion_alpha"), values.get("rrf_k"))
    if "name" in values:
        validate_name(values["name"])


#: Longest base name, in characters: a name is a label, and it appears in paths of archives.
NAME_MAX_CHARS = 200


def validate_name(name: Any) -> None:
    """A base name is a label people type and URLs carry: non-empty, no ``/`` or ``\\``, not
    ``.`` or ``..``, no NUL or other control characters (a route ``/bases/{base}`` could not
    address it, and a terminal would print it wrongly)."""
    text = str(name or "").strip()
    if not text:
        raise InvalidInput("a base needs a non-empty name", field="name")
    reason = None
    if text in (".", ".."):
        reason = "cannot be '.' or '..'"
    elif "/" in text or "\\" in text:
        reason = "cannot contain '/' or '\\'"
    elif any(unicodedata.category(ch) in ("Cc", "Cs") for ch in text):
        reason = "cannot contain NUL or other control characters"
    elif len(text) > NAME_MAX_CHARS:
        reason = f"is longer than {NAME_MAX_CHARS} characters"
    if reason is not None:
        raise InvalidInput(f"a base name {reason}: {text!r}", field="name")


def insert(conn: Connection, *, name: str, **values: Any) -> Base:
    name = name.strip()
    validate_settings({"name": name, **values})
    if find_by_name(conn, name) is not None:
        raise Conflict(f"a base named {name!r} already exists", name=name)
    ts = now_ms()
    row = {
        "id": new_base_id(),
        "name": name,
        "name_key": name_key(name),
        "status": "completed",
        "created_at": ts,
        "updated_at": ts,
    }
    row.update({k: v for k, v in values.items() if v is not None})
    # A new base's fusion is query/fusion.py's default, not the columns' server default: an
    # upgraded catalog keeps the one migration 0004e wrote (α 0.5) after the default moved.
    from knowbase.query.fusion import DEFAULT_ALPHA, DEFAULT_METHOD

    row.setdefault("fusion", DEFAULT_METHOD)
    row.setdefault("fusion_alpha", DEFAULT_ALPHA)
    if row.get("index_backend") is None:
        row["index_backend"] = backends.default_for(conn.dialect.name)
    # An unknown name, or one this catalog cannot hold, is InvalidInput, not a broken base.
    backends.check_usable(row["index_backend"], conn.dialect.name)
    with _name_taken_is_conflict(name):
        conn.execute(kb_t.insert().values(**row))
    return get(conn, row["id"])


@contextmanager
def _name_taken_is_conflict(name: str) -> Iterator[None]:
    """PostgreSQL READ COMMITTED lets two transactions pass the name check; the loser hits
    the unique index on ``name_key``, which is the same Conflict (SQLite's ``BEGIN IMMEDIATE``
    serialises the check instead)."""
    try:
        yield
    except sa.exc.IntegrityError as exc:
        if "name_key" not in str(exc.orig):
            raise
        raise Conflict(f"a base named {name!r} already exists", name=name) from exc


def get(conn: Connection, base_id: str) -> Base:
    row = conn.execute(sa.select(kb_t).where(kb_t.c.id == base_id)).first()
    if row is None:
        raise NotFound(f"no knowledge base {base_id!r}", base_id=base_id)
    return Base.from_row(row)


_FIND = sa.select(kb_t).where(kb_t.c.id == sa.bindparam("base_id"))  # built once: hot path


def find(conn: Connection, base_id: str) -> Base | None:
    row = conn.execute(_FIND, {"base_id": base_id}).first()
    return Base.from_row(row) if row else None


def find_by_name(conn: Connection, name: str) -> Base | None:
    row = conn.execute(sa.select(kb_t).where(kb_t.c.name_key == name_key(name))).first()
    return Base.from_row(row) if row else None


# Built once: every request resolves its base, and building the statement cost 3x running it.
_RESOLVE = sa.select(kb_t).where(
    sa.or_(kb_t.c.id == sa.bindparam("id"), kb_t.c.name_key == sa.bindparam("key"))
)


def resolve(conn: Connection, name_or_id: str) -> Base:
    """Every surface takes a name or an id."""
    rows = conn.execute(_RESOLVE, {"id": name_or_id, "key": name_key(name_or_id)}).all()
    # An id wins over a name that happens to look like another base's id.
    rows.sort(key=lambda r: r.id != name_or_id)
    base = Base.from_row(rows[0]) if rows else None
    if base is None:
        raise NotFound(f"no knowledge base named or with id {name_or_id!r}", base=name_or_id)
    return base


def list_all(conn: Connection) -> list[Base]:
    rows = conn.execute(sa.select(kb_t).order_by(kb_t.c.created_at, kb_t.c.id))
    return [Base.from_row(r) for r in rows]


def update(conn: Connection, base_id: str, **values: Any) -> Base:
    unknown = set(values) - UPDATABLE - {"embedding_model_id", "dimensions", "status", "error"}
    if unknown:
        raise InvalidInput(f"unknown base settings: {sorted(unknown)}")
    current = get(conn, base_id)
    merged = {**current.to_dict(), **values}
    # An existing name is not checked again: a base named before the name rules can still be
    # renamed or have its other settings changed.
    merged.pop("name", None)
    validate_settings(merged)
    if "name" in values:
        validate_name(values["name"])
        values["name"] = values["name"].strip()
        other = find_by_name(conn, values["name"])
        if other is not None and other.id != base_id:
            raise Conflict(f"a base named {values['name']!r} already exists")
        values["name_key"] = name_key(values["name"])
    with _name_taken_is_conflict(values.get("name", current.name)):
        conn.execute(
            kb_t.update().where(kb_t.c.id == base_id).values(**values, updated_at=now_ms())
        )
    return get(conn, base_id)


def delete(conn: Connection, base_id: str) -> None:
    conn.execute(kb_t.delete().where(kb_t.c.id == base_id))
