"""``GET /bases/{base}/events``: item status and job progress as Server-Sent Events.

    curl -N http://127.0.0.1:8765/bases/docs/events
    event: item
    data: {"id": "…", "status": "embedding", "error_code": null, …}

The server polls the catalog every ``POLL_S`` and sends only what changed since the last poll:
``item`` events (a deleted row arrives once with ``status: "gone"``) and ``job`` events (status
and progress). The first poll sends the current state of every item and of the base's recent
jobs, so a client that subscribes after an add still sees where it stands. Polling the catalog
(not an in-process queue) means changes made by another process's worker show up too. A
comment line every ``KEEPALIVE_S`` keeps proxies from closing an idle stream; the stream ends
when the client disconnects or the base is deleted (a last ``base`` event says so).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import sqlalchemy as sa
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from knowbase.catalog.schema import knowledge_item as item_t
from knowbase.errors import NotFound
from knowbase.interfaces.http import COMMON_ERRORS, get_kb
from knowbase.interfaces.http_models import SSE_EVENT_SCHEMA
from knowbase.interfaces.http_query import job_dict

router = APIRouter(tags=["events"], responses=COMMON_ERRORS)

POLL_S = 0.5
KEEPALIVE_S = 15.0
JOB_WINDOW = 500  # the base's most recent jobs compared per poll

State = dict[str, dict[str, Any]]


def item_states(kb: Any, base_id: str) -> State:
    """id → the fields a progress view needs, one light query (no JSON ``data`` parsing)."""
    cols = (
        item_t.c.id,
        item_t.c.group_id,
        item_t.c.type,
        item_t.c.status,
        item_t.c.error_code,
        item_t.c.error_message,
        item_t.c.updated_at,
    )
    with kb.rt.catalog.read() as conn:
        rows = conn.execute(sa.select(*cols).where(item_t.c.base_id == base_id))
        return {r.id: dict(r._mapping) for r in rows}


def job_states(kb: Any, base_id: str) -> State:
    from knowbase.runtime import queue_of

    jobs = kb.rt.jobs.list_jobs(queue=queue_of(base_id))
    return {j.id: job_dict(j) for j in jobs[-JOB_WINDOW:]}


def diff(old: State, new: State) -> list[dict[str, Any]]:
    """Entries that are new or changed in ``new``; vanished ones as ``status: "gone"``."""
    out = [value for key, value in new.items() if old.get(key) != value]
    out.extend({"id": key, "status": "gone"} for key in old if key not in new)
    return out


def format_event(event: str, data: dict[str, Any], event_id: int) -> str:
    payload = json.dumps(data, ensure_ascii=False, default=str)
    return f"id: {event_id}\nevent: {event}\ndata: {payload}\n\n"


async def stream(
    kb: Any, base_id: str, request: Request, duration_s: float | None
) -> AsyncIterator[str]:
    items: State = {}
    jobs: State = {}
    event_id = 0
    started = last_sent = time.monotonic()
    yield ": knowbase events\n\n"
    while True:
        if await request.is_disconnected():
            return
        try:
            await run_in_threadpool(kb.get_base, base_id)
        except NotFound:
            event_id += 1
            yield format_event("base", {"id": base_id, "status": "deleted"}, event_id)
            return
        new_items = await run_in_threadpool(item_states, kb, base_id)
        new_jobs = await run_in_threadpool(job_states, kb, base_id)
        # Jobs that fell out of the window are not "gone": keep comparing only the window.
        changes = [("item", d) for d in diff(items, new_items)]
        changes += [("job", d) for d in diff(jobs, new_jobs) if d.get("status") != "gone"]
        items, jobs = new_items, new_jobs
        for event, data in changes:
            event_id += 1
            yield format_event(event, data, event_id)
        now = time.monotonic()
        if changes:
            last_sent = now
        elif now - last_sent >= KEEPALIVE_S:
            last_sent = now
            yield ": keepalive\n\n"
        if duration_s is not None and now - started >= duration_s:
            return
        await anyio.sleep(POLL_S)


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
    kb: Any = Depends(get_kb),
) -> StreamingResponse:
    """Follow the base's item statuses and job progress (Server-Sent Events)."""
    b = await run_in_threadpool(kb.get_base, base)
    return StreamingResponse(
        stream(kb, b.id, request, duration_s),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
