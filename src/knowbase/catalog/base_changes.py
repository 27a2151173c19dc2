"""Changes to a base that start no job (``base_change``, migration 0009b), with who asked.

A job records who asked for it (``job.by_key``, ``job.by_surface``); creating a base, changing
its settings and deleting it start none, so they are recorded here, in the same transaction as
the change. A deleted base keeps its records (no foreign key): "who deleted it" outlives it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog.schema import base_change as change_t


def record(
    conn: Connection,
    *,
    base_id: str,
    base_name: str,
    action: str,
    by_key: str | None,
    by_surface: str | None,
    details: dict[str, Any] | None = None,
) -> None:
    """Append one change (``action``: create, settings or delete) in the caller's transaction."""
    conn.execute(
        change_t.insert().values(
            base_id=base_id,
            base_name=base_name,
            action=action,
            details=json.dumps(details, default=str, sort_keys=True) if details else None,
            by_key=by_key,
            by_surface=by_surface,
            at=int(time.time() * 1000),
        )
    )


def recent(conn: Connection, base_id: str, limit: int = 20) -> list[dict[str, Any]]:
    """The base's newest changes first: ``{action, details, by_key, by_surface, at}``."""
    rows = conn.execute(
        sa.select(change_t)
        .where(change_t.c.base_id == base_id)
        .order_by(change_t.c.at.desc(), change_t.c.id.desc())
        .limit(limit)
    ).mappings()
    return [
        {
            "action": r["action"],
            "base_name": r["base_name"],
            "details": json.loads(r["details"]) if r["details"] else {},
            "by_key": r["by_key"],
            "by_surface": r["by_surface"],
            "at": r["at"],
        }
        for r in rows
    ]
