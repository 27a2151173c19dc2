"""Changes that start no job, recorded with who asked (``catalog/base_changes.py``): a base
created, its settings changed, deleted, and an item's labels set. Jobs record who asked for
them themselves (``job.by_key``/``by_surface``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from knowbase.catalog import base_changes
from knowbase.catalog.models import Base
from knowbase.jobs.actor import current as current_actor


def record_change(
    conn: Connection, base: Base, action: str, details: dict[str, Any] | None = None
) -> None:
    """Record ``action`` on ``base`` in the caller's transaction, with who is acting
    (``jobs/actor.py``: the key and surface a request or command set)."""
    who = current_actor()
    base_changes.record(
        conn,
        base_id=base.id,
        base_name=base.name,
        action=action,
        by_key=who.key,
        by_surface=who.surface,
        details=details,
    )
