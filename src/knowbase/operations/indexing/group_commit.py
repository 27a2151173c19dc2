"""Group commit: the final writes of many index jobs of one base under one lock and one tx.

Every index job ends with a short write under the base lock (rebuild the material, mark the item
``completed``). One lock handoff and one catalog transaction per document made that section
the import's bottleneck once embedding was batched: dozens of jobs queued on the lock, each
handoff waiting for its thread to be scheduled. Here the first job to arrive becomes the
leader: it takes the lock once, opens one catalog write transaction and runs every queued
job's write in it, each inside a SAVEPOINT, so one job's failure rolls back only its own
catalog rows and is raised in that job alone. Jobs that arrive meanwhile form the next group,
led by the first of them once the current group commits. Item status writes that need no
base lock (``reading``, ``embedding``) are grouped the same way, in their own queue.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field

from sqlalchemy.engine import Connection

from knowbase.catalog import items as item_repo
from knowbase.catalog.schema import ACTIVE_STATUSES
from knowbase.runtime import Runtime

MAX_GROUP = 64  # writes per transaction: bounds how long the base lock is held at once

Write = Callable[[Connection], None]


@dataclass(eq=False)
class _Pending:
    write: Write
    roll_up: str | None = None  # container to reconcile once the group's writes ran
    single: bool = False  # one statement: atomic by itself, no SAVEPOINT needed
    done: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # set when this job must lead the next group
    roll_ups: tuple[str, ...] = ()  # more containers to reconcile (a batch's folders)
    error: BaseException | None = None


class _Queue:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.pending: list[_Pending] = []
        self.leading = False


_queues: weakref.WeakKeyDictionary[object, dict[str, _Queue]] = weakref.WeakKeyDictionary()
_queues_lock = threading.Lock()


def _queue(rt: Runtime, key: str) -> _Queue:
    with _queues_lock:  # keyed by the runtime's mutex: one queue per lock domain and base
        per_base = _queues.setdefault(rt.mutex, {})
        return per_base.setdefault(key, _Queue())


def commit(
    rt: Runtime,
    base_id: str,
    write: Write,
    *,
    lock: bool = True,
    roll_up: str | None = None,
    single: bool = False,
) -> None:
    """Run ``write(conn)`` in a catalog write transaction shared with other jobs' writes (under
    the base lock unless ``lock`` is False); return once it committed, or raise what ``write``
    raised. ``roll_up``: a container whose status the write may change; it is reconciled once
    per group after every write ran (a folder's roll-up reads all its children, so once per
    child made a flat folder's import quadratic). ``single``: ``write`` runs one statement;
    on SQLite a failed statement undoes only itself, so it needs no SAVEPOINT there (on
    PostgreSQL a failed statement aborts the whole transaction: it keeps its SAVEPOINT)."""
    q = _queue(rt, base_id if lock else f"{base_id}\x00unlocked")
    me = _Pending(write, roll_up, single)
    with q.lock:
        q.pending.append(me)
        if q.leading:
            q.wake.wait_for(lambda: me.done.is_set() or me.lead)
            if me.done.is_set():
                return _outcome(me)
        q.leading = True
    _lead(rt, base_id if lock else None, q)
    return _outcome(me)


def commit_each(
    rt: Runtime,
    base_id: str,
    writes: list[tuple[Write, str | None]],
    *,
    roll_up: Iterable[str] = (),
) -> list[BaseException | None]:
    """:func:`commit` of many writes at once (an index batch's items, each ``(write,
    roll_up)``), under the base lock: they join the base's queue together, so they share
    its transactions (``MAX_GROUP`` writes each), each in its own SAVEPOINT. Returns each
    write's error (None: committed); one write's failure is never another's. ``roll_up``:
    further containers the writes may change, reconciled with the group's."""
    if not writes:
        return []
    q = _queue(rt, base_id)
    mine = [_Pending(write, up) for write, up in writes]
    mine[0].roll_ups = tuple(roll_up)
    with q.lock:
        q.pending.extend(mine)
        lead = not q.leading
        q.leading = True
    while True:
        if lead:
            _lead(rt, base_id, q)
        with q.lock:
            q.wake.wait_for(
                lambda: (
                    all(p.done.is_set() for p in mine)
                    or any(p.lead and not p.done.is_set() for p in mine)
                )
            )
            nxt = next((p for p in mine if p.lead and not p.done.is_set()), None)
            if nxt is None:
                return [p.error for p in mine]
            nxt.lead, lead = False, True


def _outcome(p: _Pending) -> None:
    if p.error is not None:
        raise p.error


def _lead(rt: Runtime, base_id: str | None, q: _Queue) -> None:
    with q.lock:
        group, q.pending = q.pending[:MAX_GROUP], q.pending[MAX_GROUP:]
    try:
        _run_group(rt, base_id, group)
    finally:
        with q.lock:
            for p in group:
                p.done.set()
            if q.pending:
                q.pending[0].lead = True  # the next group's leader is its oldest job
            else:
                q.leading = False
            q.wake.notify_all()


def _run_group(rt: Runtime, base_id: str | None, group: list[_Pending]) -> None:
    try:
        with rt.lock(base_id) if base_id else nullcontext(), rt.catalog.write_tx() as conn:
            bare = rt.catalog.is_sqlite  # a single statement needs no SAVEPOINT there
            for p in group:
                try:
                    with nullcontext() if p.single and bare else conn.begin_nested():
                        p.write(conn)
                except BaseException as exc:  # noqa: BLE001 - this job's own outcome
                    p.error = exc
            ups = [u for p in group if not p.error for u in (p.roll_up, *p.roll_ups) if u]
            containers = dict.fromkeys(ups)
            for container_id in containers:
                item_repo.reconcile_containers(conn, container_id)
    except BaseException as exc:  # noqa: BLE001 - the lock or the commit failed: every job
        for p in group:
            if p.error is None:
                p.error = exc


def set_status(rt: Runtime, base_id: str, item_id: str, status: str) -> bool:
    """:func:`~knowbase.operations.common.set_item_status`, grouped with other jobs' status writes.

    An active item moving to another active status (the common case) is one UPDATE; anything
    else goes the full way (roll-up, the ``deleting`` guard) in a write of its own."""
    changed: list[bool] = []

    def advance(conn: Connection) -> None:
        changed.append(item_repo.advance_active(conn, item_id, status))

    def write(conn: Connection) -> None:
        changed.append(item_repo.set_status(conn, item_id, status))

    if status in ACTIVE_STATUSES:
        commit(rt, base_id, advance, lock=False, single=True)
        if changed[0]:
            return True
        changed.clear()
    commit(rt, base_id, write, lock=False)
    return changed[0]


__all__ = ["MAX_GROUP", "commit", "commit_each", "set_status"]
