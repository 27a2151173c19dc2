"""Base repository: plain functions over a connection (the caller owns the transaction)."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog import base_settings
from knowbase.catalog.db import now_ms
from knowbase.catalog.models import Base
from knowbase.catalog.schema import knowledge_base as kb_t
from knowbase.errors import Conflict, InvalidInput, NotFound
from knowbase.ids import new_base_id
from knowbase.index import backends

#: What ``update`` may change: the name and every mutable setting (:mod:`.base_settings`).
UPDATABLE = {"name", *base_settings.MUTABLE}


def name_key(name: str) -> str:
    return name.strip().casefold()


def validate_settings(values: dict[str, Any]) -> None:
    """The declared rules of each setting (:func:`.base_settings.validate`, on top of the
    table's CHECKs), and the name's, as clear InvalidInput errors."""
    base_settings.validate(values)
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
    given = {k: v for k, v in values.items() if v is not None}
    validate_settings({"name": name, **base_settings.defaults(), **given})
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
    # A new base gets the declared defaults, not the columns' server defaults: an upgraded
    # catalog keeps what its migrations wrote (0004e's α 0.5) after a default moved.
    row.update(base_settings.defaults())
    row.update({k: v for k, v in values.items() if v is not None})
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
        raise unknown_base(name_or_id)
    return base


def unknown_base(name_or_id: str) -> NotFound:
    """The error for a base that does not exist, and for one a scoped key may not see: the
    same words, so the answer does not tell which."""
    return NotFound(f"no knowledge base named or with id {name_or_id!r}", base=name_or_id)


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
