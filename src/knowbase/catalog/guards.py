"""Guards shared by the workflows (§6 "Shared guards"). Each raises before anything is written."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from sqlalchemy.engine import Connection

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.errors import BaseFailed, Conflict, InvalidInput, NotFound


def assert_base_runnable(base: Base, operation: str) -> None:
    if base.status == "failed":
        raise BaseFailed(
            f"base {base.name!r} is failed ({base.error}); restore it before {operation}",
            base_id=base.id,
            error=base.error,
        )


def outermost_roots(conn: Connection, base: Base, item_ids: Iterable[str]) -> list[Item]:
    """Dedupe ids, load each (NotFound / other base refused), drop ids under a selected one."""
    ids = list(dict.fromkeys(item_ids))
    found = item_repo.find_many(conn, ids)
    for item_id in ids:
        item = found.get(item_id)
        if item is None:
            raise NotFound(f"no knowledge item {item_id!r}", item_id=item_id)
        if item.base_id != base.id:
            raise InvalidInput(
                f"item {item_id!r} belongs to another base", item_id=item_id, base_id=base.id
            )
    selected = set(ids)
    roots: list[Item] = []
    for item_id in ids:
        parent = found[item_id].group_id
        covered = False
        while parent:
            if parent in selected:
                covered = True
                break
            row = item_repo.find(conn, parent)
            parent = row.group_id if row else None
        if not covered:
            roots.append(found[item_id])
    return roots


def assert_subtrees_terminal(conn: Connection, roots: list[Item]) -> list[Item]:
    """Reject the whole batch unless every row of every subtree is completed or failed."""
    rows = item_repo.subtree(conn, [r.id for r in roots])
    busy = Counter(r.status for r in rows if r.status not in ("completed", "failed"))
    if busy:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(busy.items()))
        raise Conflict(
            f"cannot reindex until the entire subtree is completed or failed ({counts})",
            statuses=dict(busy),
        )
    return rows
