"""Several threads add, delete and search one base at once, with workers running in-process.

Invariants: no lost item, no duplicate Concept ID among live items, and no search ever returns
an item whose delete had been accepted before the search started.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base
from knowbase.errors import NotFound
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(120)

ADDERS = 3
PER_ADDER = 12


def test_add_delete_search_at_once(kb: Knowledge, hash_base: Base, src: Path) -> None:
    base = hash_base
    kb.start_workers()
    lock = threading.Lock()
    added: list[str] = []  # item ids whose add returned
    deleted: set[str] = set()  # item ids whose delete was accepted (committed)
    errors: list[BaseException] = []
    stale_hits: list[tuple[str, str]] = []
    adders_done = threading.Event()

    def guarded(fn):  # type: ignore[no-untyped-def]
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)

        return run

    def add_loop(n: int) -> None:
        for i in range(PER_ADDER):
            # Every adder uses the same file names: renames race on the same `_N` slots.
            path = src / f"adder{n}" / f"batch{i}" / "doc.md"
            path.parent.mkdir(parents=True)
            path.write_text(f"shared words about capybaras, adder {n} item {i}", encoding="utf-8")
            inputs = [AddInput.file(path)]
            if i % 3 == 0:
                inputs.append(AddInput.note(f"capybaras note {n}-{i}", title="Capybara notes"))
            result = kb.add(base.id, inputs)
            with lock:
                added.extend(item.id for item in result.items)

    @guarded
    def deleter() -> None:
        rng = random.Random(7)
        while not adders_done.is_set() or len(deleted) < len(added) // 3:
            with lock:
                candidates = [i for i in added if i not in deleted]
            if not candidates:
                time.sleep(0.01)
                continue
            victim = rng.choice(candidates)
            with contextlib.suppress(NotFound):  # purged by an earlier delete already
                kb.delete_items(base.id, [victim])
            with lock:
                deleted.add(victim)
            time.sleep(0.02)
            if adders_done.is_set() and len(deleted) >= len(added) // 3:
                return

    @guarded
    def searcher() -> None:
        while not adders_done.is_set():
            with lock:
                gone = set(deleted)  # deletes accepted before this search started
            for hit in kb.search(base.id, "capybaras").results:
                if hit.item_id in gone:
                    stale_hits.append((hit.item_id, hit.concept_id or ""))
            time.sleep(0.005)

    threads = [threading.Thread(target=guarded(partial(add_loop, n))) for n in range(ADDERS)]
    side = [threading.Thread(target=deleter), *(threading.Thread(target=searcher) for _ in "ab")]
    for t in threads + side:
        t.start()
    for t in threads:
        t.join(timeout=60)
    adders_done.set()
    for t in side:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads + side), "a thread hung"
    assert errors == []
    kb.run_until_idle(timeout_s=60)
    assert stale_hits == []

    with kb.rt.catalog.read() as conn:
        rows = item_repo.list_items(conn, base.id, include_deleting=True)
    live = {r.id: r for r in rows}
    expected = set(added) - deleted
    assert len(added) == ADDERS * (PER_ADDER + PER_ADDER // 3)
    assert set(live) == expected, "an item was lost, or a deleted one survived"
    assert {r.status for r in live.values()} == {"completed"}
    paths = Counter(r.concept_id for r in live.values())
    assert [p for p, n in paths.items() if n > 1] == [], "duplicate Concept IDs"
    store = kb.rt.store(kb.get_base(base.id))
    assert store.material_ids() == expected == store.unit_material_ids()
    for path in paths:
        assert store.material_by_path(path or "") in live
    hits = {h.item_id for h in kb.search(base.id, "capybaras", top_k=500).results}
    assert hits <= expected and not hits & deleted
