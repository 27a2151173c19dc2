"""``GET /bases/{base}/events``: item status and job progress as Server-Sent Events.

    curl -N http://127.0.0.1:8765/bases/docs/events
    event: item
    data: {"id": "…", "status": "embedding", "error_code": null, …}

The first read sends the current state of every item (page by page) and of the base's recent
and active jobs, so a client that subscribes after an add still sees where it stands. After
that the stream is pushed: it sleeps until the catalog's change feed says rows changed (a write
in this process at once; another process's via ``NOTIFY`` on PostgreSQL or SQLite's
``data_version``, see ``catalog/feed.py``), then reads only the items and jobs whose
``updated_at`` moved since it last looked and the item tombstones, and sends what differs:
``item`` events (a deleted row arrives once with ``status: "gone"``) and ``job`` events (status
and progress). Reads are at most one per ``MIN_READ_INTERVAL_S`` however busy the base, and
cost what changed, not the size of the base. A comment line every ``KEEPALIVE_S`` keeps proxies
from closing an idle stream; the stream ends when the client disconnects or the base is deleted
(a last ``base`` event says so). The stream talks to ``Knowledge`` only.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from knowbase.errors import NotFound
from knowbase.interfaces.http.common import COMMON_ERRORS, get_kb
from knowbase.interfaces.http.models import SSE_EVENT_SCHEMA
from knowbase.interfaces.http.query import job_dict
from knowbase.service import Knowledge

router = APIRouter(tags=["events"], responses=COMMON_ERRORS)

MIN_READ_INTERVAL_S = 0.25
WAKE_CHECK_S = 0.05  # how often the coroutine looks at the feed's counter (memory only)
DISCONNECT_CHECK_S = 0.5
KEEPALIVE_S = 15.0
JOB_WINDOW = 500  # newest jobs in the first read (active ones always come too)
Event = tuple[str, dict[str, Any]]


def _fingerprint(state: dict[str, Any]) -> int:
    """A small stand-in for a state dict (one int per item, not a dict, per client)."""
    return hash(tuple(state.values()))


@dataclass
class Cursor:
    """What one client has been told, and where to read from next."""

    base_id: str
    seq: int = 0
    item_mark: int = 0  # highest item updated_at seen
    job_mark: int = 0
    items: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)

    def item_event(self, state: dict[str, Any]) -> Event | None:
        self.item_mark = max(self.item_mark, int(state["updated_at"]))
        mark = _fingerprint(state)
        if self.items.get(state["id"]) == mark:
            return None
        self.items[state["id"]] = mark
        return "item", state

    def job_event(self, job: Any) -> Event | None:
        self.job_mark = max(self.job_mark, int(job.updated_at))
        data = job_dict(job)
        mark = _fingerprint(
            {k: json.dumps(v, sort_keys=True, default=str) for k, v in data.items()}
        )
        if self.jobs.get(job.id) == mark:
            return None
        self.jobs[job.id] = mark
        return "job", data


def first_read(kb: Knowledge, cursor: Cursor) -> list[Event]:
    """Every item and the recent/active jobs; marks set so the next read misses nothing."""
    cursor.seq = kb.activity.changes.seq
    started = int(time.time() * 1000)
    events: list[Event] = []
    after: str | None = None
    while page := kb.activity.item_states(cursor.base_id, after_id=after):
        events.extend(e for s in page if (e := cursor.item_event(s)))
        after = page[-1]["id"]
    events.extend(
        e
        for j in kb.activity.recent_jobs(cursor.base_id, limit=JOB_WINDOW)
        if (e := cursor.job_event(j))
    )
    # Rows written while we paged may carry stamps from before the pages that hold them.
    cursor.item_mark = cursor.job_mark = started
    return events


def read_changes(kb: Knowledge, cursor: Cursor) -> list[Event]:
    """Items and jobs changed since the cursor's marks (and its feed floor), then deletions."""
    seq = kb.activity.changes.seq  # before reading: a change after this wakes the next read
    item_since = kb.activity.changes.read_from(cursor.seq, cursor.item_mark)
    job_since = kb.activity.changes.read_from(cursor.seq, cursor.job_mark)
    cursor.seq = seq
    events: list[Event] = []
    after: tuple[int, str] | None = None
    while page := kb.activity.changed_item_states(cursor.base_id, since_ms=item_since, after=after):
        events.extend(e for s in page if (e := cursor.item_event(s)))
        after = (page[-1]["updated_at"], page[-1]["id"])
    for item_id in kb.activity.deleted_item_ids(cursor.base_id, since_ms=item_since):
        if cursor.items.pop(item_id, None) is not None:
            events.append(("item", {"id": item_id, "status": "gone"}))
    job_after: tuple[int, str] | None = None
    while jobs := kb.activity.changed_jobs(cursor.base_id, since_ms=job_since, after=job_after):
        events.extend(e for j in jobs if (e := cursor.job_event(j)))
        job_after = (jobs[-1].updated_at, jobs[-1].id)
    return events


def format_event(event: str, data: dict[str, Any], event_id: int) -> str:
    payload = json.dumps(data, ensure_ascii=False, default=str)
    return f"id: {event_id}\nevent: {event}\ndata: {payload}\n\n"


async def _base_exists(kb: Knowledge, base_id: str) -> bool:
    try:
        await run_in_threadpool(kb.get_base, base_id)
    except NotFound:
        return False
    return True


async def stream(
    kb: Knowledge, base_id: str, request: Request, duration_s: float | None
) -> AsyncIterator[str]:
    cursor = Cursor(base_id)
    event_id = 0
    started = last_sent = last_read = time.monotonic()
    yield ": knowbase events\n\n"
    events = await run_in_threadpool(first_read, kb, cursor)
    while True:
        for event, data in events:
            event_id += 1
            yield format_event(event, data, event_id)
        now = time.monotonic()
        if events:
            last_sent = now
        elif now - last_sent >= KEEPALIVE_S:
            last_sent = now
            yield ": keepalive\n\n"
        # Sleep until the feed moves (checked in memory, no thread held), the keepalive is
        # due, or the stream's time is up; never read more often than MIN_READ_INTERVAL_S.
        await anyio.sleep(max(0.0, last_read + MIN_READ_INTERVAL_S - time.monotonic()))
        checked = time.monotonic()
        while kb.activity.changes.seq == cursor.seq:
            now = time.monotonic()
            if now - checked >= DISCONNECT_CHECK_S:
                checked = now
                if await request.is_disconnected():
                    return
            if duration_s is not None and now - started >= duration_s:
                return
            if now - last_sent >= KEEPALIVE_S:
                break
            await anyio.sleep(WAKE_CHECK_S)
        if await request.is_disconnected():
            return
        if duration_s is not None and time.monotonic() - started >= duration_s:
            return
        if not await _base_exists(kb, base_id):
            event_id += 1
            yield format_event("base", {"id": base_id, "status": "deleted"}, event_id)
            return
        last_read = time.monotonic()
        events = await run_in_threadpool(read_changes, kb, cursor)


@router.get(
    "/bases/{base}/events",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "an endless text/event-stream of `item` and `job` events",
            "content": {"text/event-stream": {"schema": SSE_EVENT_SCHEMA}},
        }
    },
)
async def events(
    base: str,
    request: Request,
    duration_s: float | None = Query(
        None, gt=0, le=86_400, description="end the stream after this many seconds"
    ),
    kb: Knowledge = Depends(get_kb),
) -> StreamingResponse:
    """Follow the base's item statuses and job progress (Server-Sent Events)."""
    b = await run_in_threadpool(kb.get_base, base)
    return StreamingResponse(
        stream(kb, b.id, request, duration_s),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
