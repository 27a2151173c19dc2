"""Adding jobs: one, many of a kind in one INSERT, or in a transaction of their own.

``enqueue`` joins the caller's transaction, so a job exists only if the change that asked for it
commits. An ``idempotency_key`` held by a non-terminal job returns that job instead of a new one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from knowbase.catalog.db import Catalog
from knowbase.catalog.schema import job as job_t
from knowbase.errors import InvalidInput, KnowbaseError, Unavailable
from knowbase.ids import new_time_id
from knowbase.jobs.actor import current as current_actor
from knowbase.jobs.model import Job
from knowbase.jobs.registry import JobRegistry
from knowbase.jobs.wakeups import JobWakeups


def new_job_id() -> str:
    """A uuid7, monotonic in this process: ids sort by creation like the rows they name."""
    return new_time_id()


class Enqueuer:
    """Inserts job rows for the registered kinds and wakes the queue's idle workers."""

    def __init__(
        self,
        catalog: Catalog,
        registry: JobRegistry,
        wakeups: JobWakeups,
        ms: Callable[[], int],
    ) -> None:
        self.catalog = catalog
        self.registry = registry
        self.wakeups = wakeups
        self._ms = ms

    def enqueue(
        self,
        conn: Connection,
        kind: str,
        payload: dict[str, Any],
        *,
        queue: str,
        idempotency_key: str | None = None,
        parent_id: str | None = None,
        delay_s: float = 0,
    ) -> Job:
        """Add a job inside the caller's transaction (``conn`` from ``catalog.write_tx()``):
        it exists only if that transaction commits. When a non-terminal job holds the same
        ``idempotency_key``, that job is returned and nothing is inserted; terminal jobs never
        block a new one."""
        values = self._new_row(kind, payload, queue, idempotency_key, parent_id, delay_s)
        if idempotency_key is None:
            row = conn.execute(sa.insert(job_t).values(values).returning(*job_t.c)).one()
            return self._enqueued(conn, Job.from_row(row), delay_s)
        for _ in range(3):
            row = conn.execute(self._insert_unless_active(conn, values)).first()
            if row is not None:
                return self._enqueued(conn, Job.from_row(row), delay_s)
            existing = conn.execute(
                sa.select(job_t).where(job_t.c.active_key == idempotency_key)
            ).first()
            if existing is not None:
                return Job.from_row(existing)
            # PostgreSQL READ COMMITTED: the holder went terminal between the two statements.
        raise Unavailable("could not enqueue: idempotency key kept changing", key=idempotency_key)

    def enqueue_many(
        self,
        conn: Connection,
        kind: str,
        jobs: Sequence[tuple[dict[str, Any], str | None]],
        *,
        queue: str,
        parent_id: str | None = None,
    ) -> None:
        """:meth:`enqueue` for many jobs of one kind, ``(payload, idempotency_key)`` each, in
        one multi-row INSERT (a folder's files). A key a non-terminal job holds skips its row,
        as :meth:`enqueue` would return that job instead."""
        rows = [self._new_row(kind, payload, queue, key, parent_id, 0) for payload, key in jobs]
        if not rows:
            return
        conn.execute(self._insert_unless_active(conn, None), rows)
        self.wakeups.notify(conn, queue)

    def _new_row(
        self,
        kind: str,
        payload: dict[str, Any],
        queue: str,
        idempotency_key: str | None,
        parent_id: str | None,
        delay_s: float,
    ) -> dict[str, Any]:
        reg = self.registry.registration(kind)
        if not isinstance(payload, dict):
            raise InvalidInput("job payload must be a JSON object", kind=kind)
        try:
            payload_text = json.dumps(payload, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"job payload is not JSON: {exc}", kind=kind) from exc
        now = self._ms()
        actor = current_actor()
        return {
            "id": new_job_id(),
            "kind": kind,
            "queue": queue,
            "payload": payload_text,
            "status": "pending",
            "idempotency_key": idempotency_key,
            "active_key": idempotency_key,
            "parent_id": parent_id,
            "attempts": 0,
            "max_attempts": reg.kind.max_attempts,
            "run_at": now + max(0, int(delay_s * 1000)),
            "cancel_requested": False,
            "created_at": now,
            "updated_at": now,
            "by_key": actor.key,
            "by_surface": actor.surface,
        }

    def _enqueued(self, conn: Connection, job: Job, delay_s: float) -> Job:
        if delay_s <= 0:  # a deferred job is found by the poll once due
            self.wakeups.notify(conn, job.queue)
        return job

    @staticmethod
    def _insert_unless_active(conn: Connection, values: dict[str, Any] | None) -> Any:
        """INSERT … ON CONFLICT (active_key) DO NOTHING RETURNING *: a collision returns no
        row instead of aborting the caller's transaction (the origin aborted it). ``values``
        None: the bare statement, without RETURNING, for a list of rows (executemany)."""
        name = conn.dialect.name
        if name == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        elif name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:  # pragma: no cover - only SQLite and PostgreSQL are supported
            raise KnowbaseError(f"unsupported catalog dialect {name!r}")
        if values is None:
            return insert(job_t).on_conflict_do_nothing(index_elements=["active_key"])
        return (
            insert(job_t)
            .values(values)
            .on_conflict_do_nothing(index_elements=["active_key"])
            .returning(*job_t.c)
        )

    def enqueue_now(self, kind: str, payload: dict[str, Any], **kw: Any) -> Job:
        """:meth:`enqueue` in a transaction of its own."""
        with self.catalog.write_tx() as conn:
            return self.enqueue(conn, kind, payload, **kw)


__all__ = ["Enqueuer", "new_job_id"]
