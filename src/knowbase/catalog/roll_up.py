"""The roll-up of §1.3: a container's (a folder's, a site's) status derived from its children.

After a child's status changes, each container above it is set from its children: processing
while any child is not done, failed (``child_failed``) when one failed, else completed. A
container being deleted is never touched, and one that failed on its own (its expansion failed
and took back the rows it wrote) keeps its own error.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog.db import now_ms
from knowbase.catalog.schema import knowledge_item as it

CHILD_FAILED = ("child_failed", "One or more child items failed")


def reconcile_containers(conn: Connection, container_id: str | None) -> None:
    """The roll-up of §1.3: walk up from ``container_id`` deriving each container's status."""
    seen: set[str] = set()
    while container_id and container_id not in seen:
        seen.add(container_id)
        row = conn.execute(
            sa.select(it.c.status, it.c.group_id, it.c.base_id, it.c.error_code).where(
                it.c.id == container_id
            )
        ).first()
        if row is None or row.status == "deleting":
            return
        if row.status != "preparing":
            kids = {
                r[0]
                for r in conn.execute(
                    sa.select(it.c.status)
                    # base_id leads the (base_id, group_id) index: without it SQLite scanned
                    # every item of the catalog per roll-up, quadratic over a big import.
                    .where(
                        it.c.base_id == row.base_id,
                        it.c.group_id == container_id,
                        it.c.status != "deleting",
                    )
                    .group_by(it.c.status)
                )
            }
            if not kids and row.status == "failed" and row.error_code != CHILD_FAILED[0]:
                # Its own failure (a folder whose expansion failed, and took back the rows
                # it wrote): no child can tell it otherwise. A late roll-up of a child it
                # took back would have reported the empty folder completed.
                container_id = row.group_id
                continue
            if any(s not in ("completed", "failed") for s in kids):
                values: dict[str, Any] = {
                    "status": "processing",
                    "error_code": None,
                    "error_message": None,
                }
            elif "failed" in kids:
                values = {
                    "status": "failed",
                    "error_code": CHILD_FAILED[0],
                    "error_message": CHILD_FAILED[1],
                }
            else:
                values = {"status": "completed", "error_code": None, "error_message": None}
            conn.execute(
                it.update()
                .where(it.c.id == container_id, it.c.status != "deleting")
                .values(**values, updated_at=now_ms())
            )
        container_id = row.group_id
