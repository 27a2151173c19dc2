"""The event stream over real HTTP on loopback: pushed by the change feed, reads what changed.

BM25-only bases: no model loads. The stream's reads are also driven directly
(``first_read``/``read_changes``) to count what they fetch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import uvicorn

from knowbase.catalog import items as item_repo
from knowbase.catalog.db import now_ms
from knowbase.catalog.schema import job as job_t
from knowbase.catalog.schema import knowledge_item as item_t
from knowbase.ids import new_time_id
from knowbase.interfaces.http import create_app
from knowbase.interfaces.http import events as http_events
from knowbase.operations import kinds
from knowbase.operations.add.inputs import AddInput
from knowbase.runtime import queue_of
from knowbase.service import Knowledge
from knowbase.settings import load_settings

pytestmark = pytest.mark.timeout(90)


@contextmanager
def live_server(app) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """Serve ``app`` on a free loopback port in a thread; yields the base URL."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def sse_events(response: httpx.Response | Iterator[str]) -> Iterator[tuple[str, dict]]:
    event, data = None, []
    lines = response.iter_lines() if isinstance(response, httpx.Response) else response
    for line in lines:
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif not line and event:
            yield event, json.loads("\n".join(data))
            event, data = None, []


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def kb(home: Path) -> Iterator[Knowledge]:
    with Knowledge(load_settings(home), start_workers=True) as kb:
        yield kb


@pytest.fixture
def client(kb: Knowledge) -> Iterator[httpx.Client]:
    with live_server(create_app(kb)) as url, httpx.Client(base_url=url, timeout=30) as c:
        yield c


def old_finished_jobs(kb: Knowledge, base_id: str, n: int) -> list[str]:
    """``n`` completed jobs of the base from an hour ago: history the stream must page past."""
    ts = now_ms() - 3_600_000
    rows = [
        {
            "id": new_time_id(),
            "kind": kinds.DELETE_SUBTREE.name,
            "queue": queue_of(base_id),
            "payload": json.dumps({"base_id": base_id, "root_item_ids": []}),
            "status": "completed",
            "attempts": 1,
            "max_attempts": 3,
            "run_at": ts,
            "cancel_requested": False,
            "created_at": ts,
            "updated_at": ts,
            "finished_at": ts,
        }
        for _ in range(n)
    ]
    with kb.rt.catalog.write_tx() as conn:
        conn.execute(sa.insert(job_t), rows)
    return [r["id"] for r in rows]


def test_the_1001st_job_appears_in_the_stream(client: httpx.Client, kb: Knowledge) -> None:
    base = client.post("/bases", json={"name": "busy"}).json()
    old_finished_jobs(kb, base["id"], 1_000)
    with client.stream("GET", "/bases/busy/events") as stream:
        r = client.post("/bases/busy/items", json={"inputs": [{"type": "note", "content": "x"}]})
        assert r.status_code == 201, r.text
        (job_id,) = r.json()["job_ids"]
        statuses = []
        for event, data in sse_events(stream):
            if event == "job" and data["id"] == job_id:
                statuses.append(data["status"])
                if data["status"] == "completed":
                    break
    assert statuses[-1] == "completed"
    # the listing shows it first, too
    assert client.get("/jobs", params={"base": "busy", "limit": 1}).json()[0]["id"] == job_id


def test_a_new_stream_sees_the_newest_jobs_first_read(client: httpx.Client, kb: Knowledge) -> None:
    base = client.post("/bases", json={"name": "later"}).json()
    old = old_finished_jobs(kb, base["id"], 1_200)
    r = client.post("/bases/later/items", json={"inputs": [{"type": "note", "content": "y"}]})
    (job_id,) = r.json()["job_ids"]
    seen: set[str] = set()
    with client.stream("GET", "/bases/later/events", params={"duration_s": 2}) as stream:
        for event, data in sse_events(stream):
            if event == "job":
                seen.add(data["id"])
    assert job_id in seen
    assert old[-1] in seen and old[0] not in seen  # the newest window, not the oldest


def test_a_change_in_another_process_is_pushed(tmp_path: Path) -> None:
    """No worker here: the item is added and indexed by another process, so only SQLite's
    ``data_version`` can wake this stream."""
    home = tmp_path / "shared-home"
    script = (
        "import sys\n"
        "from knowbase.operations.add.inputs import AddInput\n"
        "from knowbase.service import Knowledge\n"
        "from knowbase.settings import load_settings\n"
        "with Knowledge(load_settings(sys.argv[1])) as kb:\n"
        "    r = kb.add('shared', [AddInput.note('from elsewhere')], wait=True, timeout_s=60)\n"
        "    print(r.items[0].id)\n"
    )
    with Knowledge(load_settings(home)) as kb:
        base = kb.create_base("shared", file_processor_id=None)
        kb.add_note(base.id, "already here", wait=False)  # the first read has an item to send
        app = create_app(kb)
        with (
            live_server(app) as url,
            httpx.Client(base_url=url, timeout=30) as client,
            client.stream("GET", "/bases/shared/events") as stream,
        ):
            lines = stream.iter_lines()
            assert next(lines) == ": knowbase events"
            next(lines)  # the first read's item event: the stream now waits on the feed
            assert kb.activity.changes.watching.wait(10)
            out = subprocess.run(
                [sys.executable, "-c", script, str(home)],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            item_id = out.stdout.strip().splitlines()[-1]
            statuses = []
            for event, data in sse_events(lines):
                if event == "item" and data["id"] == item_id:
                    statuses.append(data["status"])
                    if data["status"] == "completed":
                        break
        assert statuses[-1] == "completed"
        assert not kb._workers.running  # nothing here did the work


def test_reads_after_the_first_cost_what_changed(kb: Knowledge) -> None:
    base = kb.create_base("big", file_processor_id=None)
    with kb.rt.catalog.write_tx() as conn:
        ids = [
            item_repo.insert_active(conn, base_id=base.id, type="note", data={}).id
            for _ in range(1_200)
        ]
        # an hour old: outside any lag a read allows for
        conn.execute(sa.update(item_t).values(updated_at=now_ms() - 3_600_000))
    fetched: list[int] = []
    real = kb.activity.changed_item_states

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        rows = real(*args, **kwargs)
        fetched.append(len(rows))
        return rows

    kb.activity.changed_item_states = counting  # type: ignore[method-assign]
    cursor = http_events.Cursor(base.id)
    first = http_events.first_read(kb, cursor)
    assert sorted(d["id"] for e, d in first if e == "item") == sorted(ids)
    assert http_events.read_changes(kb, cursor) == []
    assert sum(fetched) == 0
    with kb.rt.catalog.write_tx() as conn:
        item_repo.set_status(conn, ids[7], "completed")
        item_repo.delete_rows(conn, [ids[9]])
    events = http_events.read_changes(kb, cursor)
    assert [(e, d["id"], d["status"]) for e, d in events] == [
        ("item", ids[7], "completed"),
        ("item", ids[9], "gone"),
    ]
    assert sum(fetched) == 1  # one changed row read, not the base's 1,200
    assert http_events.read_changes(kb, cursor) == []  # nothing sent twice


def test_a_wake_reads_only_rows_that_moved(client: httpx.Client, kb: Knowledge) -> None:
    """A change elsewhere wakes the stream; its reads are range reads on ``updated_at``, never
    the whole base as the polling stream did every 0.5 s."""
    client.post("/bases", json={"name": "watched"}).raise_for_status()
    other = kb.create_base("other", file_processor_id=None)
    statements: list[str] = []

    def record(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
        if "FROM knowledge_item" in statement:
            statements.append(" ".join(statement.split()))

    with client.stream("GET", "/bases/watched/events", params={"duration_s": 3}) as stream:
        lines = iter(stream.iter_lines())
        assert next(lines) == ": knowbase events"
        time.sleep(0.5)  # the first read (a full snapshot, once) is done
        sa.event.listen(kb.rt.catalog.engine, "before_cursor_execute", record)
        try:
            for i in range(3):
                kb.add(other.id, [AddInput.note(f"elsewhere {i}")])
                time.sleep(0.4)
            list(lines)  # the stream ends after duration_s
        finally:
            sa.event.remove(kb.rt.catalog.engine, "before_cursor_execute", record)
    reads = [s for s in statements if "knowledge_item.base_id =" in s and "WHERE" in s]
    stream_reads = [s for s in reads if "knowledge_item.type, knowledge_item.status" in s]
    assert stream_reads, "the stream did not wake"
    assert all("knowledge_item.updated_at >=" in s for s in stream_reads), stream_reads


def test_a_long_transaction_in_another_process_is_not_skipped(kb: Knowledge) -> None:
    """SQLite: another process stamps a row, holds its transaction past the lag, commits; a
    write here queues behind it and publishes at once. The stream still reports both."""
    base = kb.create_base("slow-writer", file_processor_id=None)
    with kb.rt.catalog.write_tx() as conn:
        theirs, ours = (
            item_repo.insert_active(conn, base_id=base.id, type="note", data={}).id
            for _ in range(2)
        )
    cursor = http_events.Cursor(base.id)
    http_events.first_read(kb, cursor)
    script = (
        "import sys, time\n"
        "from knowbase.catalog import items\n"
        "from knowbase.catalog.db import Catalog\n"
        "cat = Catalog(sys.argv[1])\n"
        "with cat.write_tx() as conn:\n"
        "    items.set_status(conn, sys.argv[2], 'completed')\n"
        "    print('stamped', flush=True)\n"
        "    time.sleep(3.5)\n"  # longer than the SQLite lag
    )
    other = subprocess.Popen(
        [sys.executable, "-c", script, kb.settings.catalog_url, theirs],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "stamped"
        with kb.rt.catalog.write_tx() as conn:  # waits for their commit, then goes first here
            item_repo.set_status(conn, ours, "completed")
        events = http_events.read_changes(kb, cursor)
    finally:
        assert other.wait(30) == 0
    assert {(d["id"], d["status"]) for _, d in events} == {
        (theirs, "completed"),
        (ours, "completed"),
    }
