"""Model switch by a shadow vector set (issue 15 item 4; ``operations/model_switch/workflow.py``).

Two ``hash:`` models of different widths; a ``delay`` holds the switch mid-build. Runs on every
backend of the conformance run (``KB_TEST_BACKENDS=postgres``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from knowbase.catalog.models import Base
from knowbase.errors import Conflict, InvalidInput
from knowbase.operations.add.inputs import AddInput
from knowbase.providers.hashing_provider import hash_vector
from knowbase.service import Knowledge
from knowbase.units.hashing import text_hash
from waiting import wait_until

pytestmark = pytest.mark.timeout(120)

OLD = "hash:d32"
NEW = "hash:d48?delay=0.2"  # 10 bodies per provider batch: 2 s per 100 bodies
NOTES = 120


def filled(kb: Knowledge, model: str = OLD, n: int = NOTES) -> str:
    base = kb.create_base("sw", embedding_model_id=model, file_processor_id=None)
    inputs = [AddInput.note(f"note {i} about topic{i} and shared words") for i in range(n)]
    kb.add(base.id, inputs, wait=True)
    return base.id


def all_bodies(kb: Knowledge, base_id: str) -> set[str]:
    store = kb.rt.store(kb.get_base(base_id))
    return {text_hash(u.text) for m in store.material_ids() for u in store.list_units(m)}


def running_with_progress(kb: Knowledge, base_id: str) -> bool:
    s = kb.model_switch(base_id)
    return bool(s and s["status"] == "running" and (s["progress"] or {}).get("done", 0) > 0)


def dense_hits(kb: Knowledge, base_id: str, query: str = "shared words") -> int:
    response = kb.search(base_id, query)
    assert response.mode == "hybrid"
    lane = response.explain["dense_lane"]
    assert lane["used"], lane
    return int(lane["hits"])


def lane_size(kb: Knowledge, base: Base) -> int:
    """How many units the vector lane of ``base`` (as read) returns for a query."""
    assert base.dimensions is not None
    with kb.rt.lease(base) as store:
        return len(store.vector_search(hash_vector("shared words", base.dimensions), 500))


def test_searches_use_the_old_model_during_the_build_and_the_new_one_after(kb: Knowledge) -> None:
    base_id = filled(kb)
    before = all_bodies(kb, base_id)
    status = kb.set_embedding_model(base_id, NEW)
    assert status["status"] == "pending" and status["to_model"] == NEW
    kb.start_workers()
    try:
        wait_until(lambda: running_with_progress(kb, base_id), 30, "the switch mid-build")
        seen_dims: list[int | None] = []
        while (kb.model_switch(base_id) or {})["status"] in ("pending", "running"):
            base = kb.get_base(base_id)
            seen_dims.append(base.dimensions)
            # Never an empty (or mixed) vector lane: every unit is found by the serving model.
            assert dense_hits(kb, base_id) > 0
            if base.dimensions == 32:
                # The whole old set answers: one hit per unit, no unit missing its vector.
                assert lane_size(kb, base) == len(before)
            time.sleep(0.05)
        status = kb.model_switch(base_id)
        assert status is not None and status["status"] == "completed", status
        assert 32 in seen_dims  # searched while the old model served
        progress = status["progress"]
        assert progress["done"] == progress["total"] == len(before)
    finally:
        kb.stop_workers()
    base = kb.get_base(base_id)
    assert (base.embedding_model_id, base.dimensions) == (NEW, 48)
    assert dense_hits(kb, base_id) > 0
    assert base.dimensions == 48 and lane_size(kb, base) == len(before)
    store = kb.rt.store(base)
    assert set(store.models.vectors_for(before, NEW)) == before  # every body, the new model's
    assert store.models.vectors_for(before, OLD) == {}  # the old set was dropped after the swap
    assert all_bodies(kb, base_id) == before  # same chunks: no re-chunk, no re-read


def test_progress_carries_a_measured_rate_and_an_estimate(kb: Knowledge) -> None:
    base_id = filled(kb)
    kb.set_embedding_model(base_id, NEW)
    kb.start_workers()
    try:
        wait_until(lambda: running_with_progress(kb, base_id), 30, "the switch mid-build")
        progress = kb.model_switch(base_id)["progress"]  # type: ignore[index]
        assert progress["total"] == NOTES and 0 < progress["done"] <= NOTES
        assert progress["rate_per_s"] > 0 and progress["eta_s"] is not None
        assert progress["model"] == NEW
        kb.run_until_idle(timeout_s=60)
    finally:
        kb.stop_workers()


def test_a_cancelled_switch_leaves_the_old_model_serving_and_says_why(kb: Knowledge) -> None:
    base_id = filled(kb)
    status = kb.set_embedding_model(base_id, NEW)
    kb.start_workers()
    try:
        wait_until(lambda: running_with_progress(kb, base_id), 30, "the switch mid-build")
        kb.rt.jobs.cancels.request_cancel([status["job_id"]])
        wait_until(lambda: kb.model_switch(base_id)["status"] == "cancelled", 30, "the cancel")  # type: ignore[index]
    finally:
        kb.stop_workers()
    base = kb.get_base(base_id)
    assert (base.embedding_model_id, base.dimensions) == (OLD, 32)
    assert dense_hits(kb, base_id) > 0
    store = kb.rt.store(base)
    bodies = all_bodies(kb, base_id)
    assert set(store.models.vectors_for(bodies, OLD)) == bodies
    assert store.models.vectors_for(bodies, NEW) == {}  # the shadow set was dropped
    ended = kb.model_switch(base_id)
    assert ended is not None and ended["status"] == "cancelled" and ended["error_code"]


def test_no_reader_runs_during_a_switch(
    kb: Knowledge, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import knowbase.operations.indexing.handler as index_documents

    base = kb.create_base("files", embedding_model_id=OLD, file_processor_id=None)
    for i in range(5):
        (src / f"f{i}.md").write_text(f"# File {i}\n\nbody of file {i} with words", "utf-8")
    kb.add(base.id, [AddInput.directory(src)], wait=True)
    calls: list[str] = []
    real = index_documents.read_item

    def counting(rt, b, item):  # type: ignore[no-untyped-def]
        calls.append(item.id)
        return real(rt, b, item)

    monkeypatch.setattr(index_documents, "read_item", counting)
    kb.add(base.id, [AddInput.note("a note read once")], wait=True)
    assert len(calls) == 1  # the counter sees reads
    calls.clear()
    kb.set_embedding_model(base.id, "hash:d48?window=8")  # smaller window: re-chunk too
    kb.run_until_idle(timeout_s=60)
    assert calls == []
    assert kb.get_base(base.id).embedding_model_id == "hash:d48?window=8"


def test_a_smaller_window_rechunks_from_the_stored_content(kb: Knowledge) -> None:
    long_text = " ".join(f"word{i}" for i in range(60))
    base = kb.create_base("rc", embedding_model_id=OLD, file_processor_id=None)
    item = kb.add_note(base.id, long_text)
    assert len(kb.list_item_chunks(base.id, item.id)) == 1
    kb.set_embedding_model(base.id, "hash:d48?window=12")
    kb.run_until_idle(timeout_s=60)
    after = kb.get_base(base.id)
    assert (after.dimensions, after.chunk_size) == (48, 12)
    units = kb.list_item_chunks(base.id, item.id)
    assert len(units) > 1
    assert all(long_text[u.char_start : u.char_end] == u.text for u in units)
    store = kb.rt.store(after)
    bodies = {text_hash(u.text) for u in units}
    assert set(store.models.vectors_for(bodies, "hash:d48?window=12")) == bodies
    assert kb.search(base.id, "word30").results[0].item_id == item.id


def test_items_added_during_a_switch_end_with_the_new_models_vectors(kb: Knowledge) -> None:
    base_id = filled(kb)
    kb.set_embedding_model(base_id, NEW)
    kb.start_workers()
    try:
        wait_until(lambda: running_with_progress(kb, base_id), 30, "the switch mid-build")
        added = kb.add(base_id, [AddInput.note(f"late arrival {i} zebra") for i in range(5)])
        late = {i.id for i in added.items}

        def late_done() -> bool:
            return {kb.get_item(base_id, i).status for i in late} == {"completed"}

        wait_until(late_done, 30, "the late items indexed")
        # ... by the old model, while the switch was still building: the case to cover.
        assert kb.model_switch(base_id)["status"] == "running"  # type: ignore[index]
        kb.run_until_idle(timeout_s=60)
    finally:
        kb.stop_workers()
    base = kb.get_base(base_id)
    assert base.embedding_model_id == NEW
    assert {i.status for i in kb.list_items(base_id)} == {"completed"}
    bodies = all_bodies(kb, base_id)
    store = kb.rt.store(base)
    assert set(store.models.vectors_for(bodies, NEW)) == bodies  # the late ones too
    assert store.models.bodies_without_vectors(NEW) == {}
    found = {r.item_id for r in kb.search(base_id, "late arrival zebra").results}
    assert late <= found


def test_a_same_width_switch_keeps_the_sets_apart(kb: Knowledge) -> None:
    base_id = filled(kb, n=5)
    kb.set_embedding_model(base_id, "hash:d32?window=500")  # same dims, another model id
    kb.run_until_idle(timeout_s=60)
    base = kb.get_base(base_id)
    assert (base.embedding_model_id, base.dimensions) == ("hash:d32?window=500", 32)
    bodies = all_bodies(kb, base_id)
    store = kb.rt.store(base)
    assert set(store.models.vectors_for(bodies, "hash:d32?window=500")) == bodies
    assert store.models.vectors_for(bodies, OLD) == {}


def test_refusals(kb: Knowledge) -> None:
    base_id = filled(kb, n=3)
    with pytest.raises(InvalidInput, match="already uses"):
        kb.set_embedding_model(base_id, OLD)
    kb.set_embedding_model(base_id, NEW)
    with pytest.raises(Conflict, match="already switching"):
        kb.set_embedding_model(base_id, "hash:d16")
    kb.run_until_idle(timeout_s=60)
    assert kb.get_base(base_id).embedding_model_id == NEW


def test_an_empty_base_swaps_at_once(kb: Knowledge) -> None:
    base = kb.create_base("empty", embedding_model_id=OLD, file_processor_id=None)
    assert kb.set_embedding_model(base.id, "hash:d48")["status"] == "swapped"
    assert kb.get_base(base.id).dimensions == 48
    assert kb.activity.list_jobs(base=base.id) == []


def test_a_bm25_base_uses_the_same_path(kb: Knowledge, bm25_base) -> None:  # type: ignore[no-untyped-def]
    kb.add(bm25_base.id, [AddInput.note(f"plain note {i}") for i in range(4)], wait=True)
    status = kb.set_embedding_model(bm25_base.id, "hash:d48")
    assert status["from_model"] is None
    kb.run_until_idle(timeout_s=60)
    assert kb.get_base(bm25_base.id).dimensions == 48
    assert dense_hits(kb, bm25_base.id, "plain note") == 4


def _downgrade_to_the_old_layout(kb: Knowledge, base: Base) -> None:
    """Rewrite the base's vectors as the layout before model ids stored them (hash only)."""
    if base.index_backend == "qdrant":  # points without the model_id payload
        from qdrant_client import models

        client = kb.rt.store(base).client  # type: ignore[attr-defined]
        kb.rt.close()
        mine = models.Filter(
            must=[models.FieldCondition(key="base_id", match=models.MatchValue(value=base.id))]
        )
        client.delete_payload(
            f"kb_{base.dimensions}", keys=["model_id"], points=models.FilterSelector(filter=mine)
        )
        return
    if kb.rt.catalog.engine.dialect.name == "postgresql":
        with kb.rt.catalog.engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE kb_vec_32 DROP CONSTRAINT kb_vec_32_pkey")
            conn.exec_driver_sql("ALTER TABLE kb_vec_32 DROP COLUMN model_id")
            conn.exec_driver_sql(
                "ALTER TABLE kb_vec_32 ADD PRIMARY KEY (base_id, embedding_text_hash)"
            )
        return
    import apsw

    conn = apsw.Connection(str(kb.rt.storage(base.id).index_path))
    conn.execute(
        "BEGIN; CREATE TABLE embedding_old (embedding_text_hash TEXT PRIMARY KEY,"
        " vector_blob BLOB NOT NULL, created_at TEXT NOT NULL);"
        " INSERT INTO embedding_old SELECT embedding_text_hash, vector_blob, created_at"
        " FROM embedding; DROP TABLE embedding; ALTER TABLE embedding_old RENAME TO embedding;"
        " UPDATE meta SET schema_version = 1; COMMIT;"
    )
    conn.close()


def test_an_index_of_the_old_layout_is_upgraded_in_place(kb_settings) -> None:  # type: ignore[no-untyped-def]
    with Knowledge(kb_settings) as kb:
        base_id = filled(kb, n=6)
        bodies = all_bodies(kb, base_id)
        base = kb.get_base(base_id)
        kb.rt.close()
        _downgrade_to_the_old_layout(kb, base)
    with Knowledge(kb_settings) as again:  # a fresh process's first open upgrades
        store = again.rt.store(again.get_base(base_id))
        assert not getattr(store, "was_reset", False)
        # labelled with the base's model
        assert set(store.models.vectors_for(bodies, OLD)) == bodies
        assert dense_hits(again, base_id) == 6
        again.set_embedding_model(base_id, "hash:d48")  # and the upgraded index can switch
        again.run_until_idle(timeout_s=60)
        assert dense_hits(again, base_id) == 6


def test_a_qdrant_base_switches_by_its_own_points(kb: Knowledge) -> None:
    """A base on the qdrant backend (local mode: no Qdrant server runs here) switches like any
    other: the old model's points answer during the build, the new model's after, and after
    the swap the base has the new model's points only — one per unit, no body point left."""
    pytest.importorskip("qdrant_client")
    from qdrant_client import models

    from knowbase.index.backends import close_qdrant_clients

    try:
        base = kb.create_base(
            "q", embedding_model_id=OLD, index_backend="qdrant", file_processor_id=None
        )
        notes = [AddInput.note(f"note {i} about topic{i} and shared words") for i in range(NOTES)]
        kb.add(base.id, notes, wait=True)
        before = all_bodies(kb, base.id)
        kb.set_embedding_model(base.id, NEW)
        kb.start_workers()
        try:
            wait_until(lambda: running_with_progress(kb, base.id), 30, "the switch mid-build")
            seen: list[int | None] = []
            while (kb.model_switch(base.id) or {})["status"] in ("pending", "running"):
                serving = kb.get_base(base.id)
                seen.append(serving.dimensions)
                assert dense_hits(kb, base.id) > 0
                if serving.dimensions == 32:
                    assert lane_size(kb, serving) == len(before)
                time.sleep(0.05)
            assert kb.model_switch(base.id)["status"] == "completed"  # type: ignore[index]
        finally:
            kb.stop_workers()
        assert 32 in seen
        after = kb.get_base(base.id)
        assert (after.embedding_model_id, after.dimensions) == (NEW, 48)
        assert lane_size(kb, after) == len(before)
        store = kb.rt.store(after)
        assert set(store.models.vectors_for(before, NEW)) == before
        assert store.models.vectors_for(before, OLD) == {}
        mine = models.Filter(
            must=[models.FieldCondition(key="base_id", match=models.MatchValue(value=base.id))]
        )
        points = [
            p
            for name in ("kb_32", "kb_48")
            for p in store.client.scroll(name, scroll_filter=mine, limit=1000)[0]  # type: ignore[attr-defined]
        ]
        assert {p.payload["model_id"] for p in points} == {NEW}
        assert all(p.payload.get("unit_id") for p in points)  # no body point left
        units = {u.unit_id for m in store.material_ids() for u in store.list_units(m)}
        assert sorted(p.payload["unit_id"] for p in points) == sorted(units)
    finally:
        kb.close()
        close_qdrant_clients()  # local mode: release it before the interpreter exits


def test_an_item_embedded_by_the_old_model_and_written_after_the_swap_is_redone(
    kb: Knowledge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the fence in ``index_batch`` closes: the swap lands between an index job's
    embedding (old model) and its write. Held open deterministically by pausing that embed."""
    import knowbase.pipeline.indexing.embed as embed

    base_id = filled(kb, n=3)
    # The switch's one provider call takes 0.5 s, so the late item's index job (started at the
    # same time) embeds before the swap even on a loaded machine; without the delay the switch
    # could swap first and the race under test never happened.
    slow = "hash:d48?delay=0.5"
    kb.set_embedding_model(base_id, slow)
    late = kb.add(base_id, [AddInput.note("late arrival with a slow embedding")]).items[0]
    real = embed.embed_missing
    held: list[int] = []

    def pausing(bodies, **kw):  # type: ignore[no-untyped-def]
        out = real(bodies, **kw)
        if any("late arrival" in b for b in bodies) and kw["dims"] == 32:
            held.append(1)  # embedded by the old model: wait until the switch swapped
            wait_until(lambda: kb.get_base(base_id).dimensions == 48, 30, "the swap")
        return out

    monkeypatch.setattr(embed, "embed_missing", pausing)
    kb.start_workers()
    try:
        # The redo is a retry after a backoff: "idle" can come while it is not due yet, so
        # wait for the item itself to settle.
        wait_until(lambda: kb.get_item(base_id, late.id).status == "completed", 60, "the redo")
        kb.run_until_idle(timeout_s=60)
    finally:
        kb.stop_workers()
    assert held == [1]
    base = kb.get_base(base_id)
    assert base.embedding_model_id == slow
    bodies = all_bodies(kb, base_id)
    assert set(kb.rt.store(base).models.vectors_for(bodies, slow)) == bodies
    job = next(
        j for j in kb.activity.list_jobs(base=base_id) if j.payload.get("item_id") == late.id
    )
    assert job.attempts == 2  # refused once (embedding_model_changed), then redone


def test_a_switch_without_rechunk_embeds_the_contextual_unit_text(kb: Knowledge) -> None:
    """The new model's vectors are those a fresh index by it computes: from the unit text
    (title > heading path, then the slice), not the bare slice (issue 29 item 3)."""
    note = "# Pump manual\n\n## Cleaning\n\nRinse the filter under warm water every week."
    old = kb.create_base("ctx-old", embedding_model_id=OLD, file_processor_id=None)
    fresh = kb.create_base("ctx-new", embedding_model_id="hash:d48", file_processor_id=None)
    for base in (old, fresh):
        kb.add(base.id, [AddInput.note(note, title="pump.md")], wait=True)
    kb.set_embedding_model(old.id, "hash:d48")  # no window: the same chunks, no re-chunk
    kb.run_until_idle(timeout_s=60)
    switched = kb.get_base(old.id)
    assert (switched.embedding_model_id, switched.chunk_size) == ("hash:d48", old.chunk_size)
    bodies = all_bodies(kb, old.id)
    assert bodies == all_bodies(kb, fresh.id) and len(bodies) == 1
    got = kb.rt.store(switched).models.vectors_for(bodies, "hash:d48")
    want = kb.rt.store(kb.get_base(fresh.id)).models.vectors_for(bodies, "hash:d48")
    (h,) = bodies
    assert got[h].tolist() == want[h].tolist()
