"""Runtime's store cache: a replaced store stays open for its readers; a transient open retries."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from knowbase.catalog.models import Base
from knowbase.errors import DatabaseCannotOpen, VectorStoreUnavailable
from knowbase.index.base import MaterialInput
from knowbase.runtime import OPEN_RETRY_DELAYS
from knowbase.service import Knowledge
from knowbase.settings import Settings
from knowbase.units.chunk import Chunk


@pytest.fixture
def kb_settings(home) -> Settings:  # type: ignore[no-untyped-def]
    """An embedded home on every run: these are the SQLite store's lifecycle (files, WAL) and
    write materials with no catalog items, which the postgres lane's visibility join hides."""
    return Settings(home=home, test_providers=True)


def _one_material(kb: Knowledge, base: Base) -> None:
    text = "alpha beta gamma"
    chunk = Chunk(unit_index=0, text=text, char_start=0, char_end=len(text))
    with kb.rt.lock(base.id):
        kb.rt.store(base).rebuild_material(MaterialInput("m1", "a.md", text, [chunk]), {})


def test_a_leased_store_outlives_close_store_until_released(kb: Knowledge, bm25_base: Base) -> None:
    _one_material(kb, bm25_base)
    with kb.rt.lease(bm25_base) as store:
        kb.rt.close_store(bm25_base.id)  # the base update path
        # before: the connections were closed here and this read raised
        assert [h.material_id for h in store.keyword_search("beta", 5)] == ["m1"]
        fresh = kb.rt.store(bm25_base)
        assert fresh is not store
    with pytest.raises(VectorStoreUnavailable):
        store.keyword_search("beta", 5)  # closed once the last holder let go
    assert [h.material_id for h in fresh.keyword_search("beta", 5)] == ["m1"]


def test_a_call_in_flight_finishes_before_the_close(kb: Knowledge, bm25_base: Base) -> None:
    _one_material(kb, bm25_base)
    store = kb.rt.store(bm25_base)
    store.leases.acquire()  # what every public call does for its duration
    kb.rt.close_store(bm25_base.id)
    assert store.material_ids() == {"m1"}  # still open: a holder is inside
    store.leases.release()
    assert store.leases.closed


def test_readers_never_fail_while_the_store_is_replaced(kb: Knowledge, bm25_base: Base) -> None:
    _one_material(kb, bm25_base)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                with kb.rt.lease(bm25_base) as store:
                    assert store.keyword_search("gamma", 5)
                    assert store.content_text("m1")
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 2
    replaced = 0
    while time.monotonic() < deadline:
        kb.rt.close_store(bm25_base.id)
        kb.rt.store(bm25_base)
        replaced += 1
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert replaced > 10


def _block_wal(kb: Knowledge, base: Base) -> object:
    kb.rt.close_store(base.id)
    index = kb.rt.storage(base.id).index_path
    for suffix in ("-wal", "-shm"):
        index.with_name(index.name + suffix).unlink(missing_ok=True)
    wal = index.with_name(index.name + "-wal")
    wal.mkdir()  # SQLite cannot open its WAL: CantOpenError, as on a mount that drops out
    return wal


def test_a_transient_open_error_is_retried(kb: Knowledge, bm25_base: Base) -> None:
    _one_material(kb, bm25_base)
    wal = _block_wal(kb, bm25_base)
    threading.Timer(0.2, wal.rmdir).start()  # type: ignore[attr-defined]
    store = kb.rt.store(bm25_base)
    assert store.material_ids() == {"m1"}
    assert kb.get_base(bm25_base.id).status == "completed"  # before: failed for good


def test_a_lasting_open_error_is_named_and_does_not_fail_the_base(
    kb: Knowledge, bm25_base: Base
) -> None:
    """Issue 37: an index that cannot be opened (here a folder where its -wal goes) is a
    ``database_cannot_open`` naming the file, after the bounded retries — not damage: the base
    is not failed (which advised a restore), and it works again once the obstacle is gone."""
    wal = _block_wal(kb, bm25_base)
    started = time.monotonic()
    with pytest.raises(DatabaseCannotOpen, match="index.sqlite"):
        kb.rt.store(bm25_base)
    assert 1.0 < time.monotonic() - started < 10  # the bounded retries, then the error
    assert kb.get_base(bm25_base.id).status == "completed"
    wal.rmdir()  # type: ignore[attr-defined]
    assert kb.rt.store(kb.get_base(bm25_base.id)).changes_version() >= 0


def test_the_registry_opens_the_backend_the_base_records(kb: Knowledge, bm25_base: Base) -> None:
    assert bm25_base.index_backend == "sqlite"  # an embedded home
    other = dataclasses.replace(bm25_base, index_backend="nope")
    kb.rt.close_store(bm25_base.id)
    with pytest.raises(Exception, match="unknown index backend"):
        kb.rt.store(other)


def test_a_base_on_the_qdrant_backend_indexes_and_searches(kb: Knowledge) -> None:
    pytest.importorskip("qdrant_client")
    from knowbase.index import backends

    base = kb.create_base(
        "q", embedding_model_id="hash:d64", file_processor_id=None, index_backend="qdrant"
    )
    try:
        assert kb.get_base("q").index_backend == "qdrant"
        item = kb.add_note("q", "Comets have icy tails that point away from the sun.")
        assert kb.get_item(base.id, item.id).status == "completed"
        store = kb.rt.store(kb.get_base("q"))
        assert store.client.count(store.collection, count_filter=store._filter()).count == 1
        response = kb.search("q", "icy comets")
        assert response.mode == "hybrid"
        assert response.explain["lanes"]["vector"] >= 1
        assert response.results[0].item_id == item.id
        kb.delete_items("q", [item.id], wait=True)  # vectors go by filter with the item
        store = kb.rt.store(kb.get_base("q"))
        points = store.client.count(store.collection, count_filter=store._filter()).count
        assert points == 0
        assert kb.search("q", "icy comets").results == []
    finally:
        kb.close()
        backends.close_qdrant_clients()


def test_a_base_deleted_by_another_process_releases_its_index_here(kb: Knowledge) -> None:
    """Found by the soak (issue 37): after ``kb base delete`` in another process, a server kept
    the base's index (and -wal, -shm) open, deleted, until it restarted. The recovery sweep,
    which every process with workers runs every few seconds, now closes such stores."""
    import os
    import subprocess
    import sys

    base = kb.create_base("gone", file_processor_id=None)
    kb.add_note("gone", "otters hold hands")
    assert kb.search("gone", "otters").results  # the store is open in this process
    env = {**os.environ, "KNOWBASE_HOME": str(kb.settings.home)}
    done = subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", "base", "delete", "gone", "--yes"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    def held() -> list[str]:
        links = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                links.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                continue  # closed since the listing (the listing's own descriptor)
        return [link for link in links if base.id in link and link.endswith("(deleted)")]

    assert held(), "the test needs the store open before the sweep"
    kb.recover()
    assert held() == []


def test_a_reader_that_meets_a_new_base_before_its_index_waits_instead_of_failing_it(
    kb: Knowledge,
) -> None:
    """A base's creator holds its lock from before the row is visible until its index exists
    (create_base, an import); another process's reader that opened the store in between
    failed a healthy base `missing_vector_store` (CI's PostgreSQL soak, an import). It now
    waits on the lock and opens the index once it is there."""
    from knowbase.catalog import bases as base_repo
    from knowbase.ids import new_base_id

    rt = kb.rt
    base_id = new_base_id()
    opened: list[object] = []
    with rt.lock(base_id):
        with rt.catalog.write_tx() as conn:
            base = base_repo.insert(conn, name="being-made", id=base_id)
        reader = threading.Thread(target=lambda: opened.append(rt.store(base)))
        reader.start()
        # past the reader's retries of a missing index (runtime.OPEN_RETRY_DELAYS, 1.55 s): a
        # big import writes its raw files for longer than that
        time.sleep(sum(OPEN_RETRY_DELAYS) + 1.0)
        rt.storage(base.id).ensure()
        rt.store(base, create=True)
    reader.join(30)
    assert opened, "the reader did not open the new base's store"
    assert kb.get_base(base_id).status == "completed"


def test_an_index_missing_for_good_still_fails_its_base(kb: Knowledge, bm25_base: Base) -> None:
    """The recheck under the lock does not hide a real loss: nobody is making the index."""
    kb.rt.close_store(bm25_base.id)
    for path in kb.rt.storage(bm25_base.id).index_path.parent.glob("index*"):
        path.unlink()
    with pytest.raises(VectorStoreUnavailable):
        kb.rt.store(bm25_base)
    assert kb.get_base(bm25_base.id).status == "failed"
