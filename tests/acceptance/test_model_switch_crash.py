"""``kill -9`` of the worker mid model switch: the old model keeps serving; recovery resumes the
switch and keeps the shadow vectors already written (issue 15 item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_crash_recovery import workers  # noqa: F401 - the fixture

from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import Settings
from knowbase.units.hashing import text_hash
from waiting import wait_until

pytestmark = pytest.mark.timeout(120)

OLD, NEW = "hash:d32", "hash:d48?delay=0.2"


def bodies(kb: Knowledge, base_id: str) -> set[str]:
    store = kb.rt.store(kb.get_base(base_id))
    return {text_hash(u.text) for m in store.material_ids() for u in store.list_units(m)}


def test_kill_mid_switch_leaves_the_old_model_serving_then_resumes(
    kb: Knowledge,
    kb_settings: Settings,
    src: Path,
    workers,  # noqa: F811
) -> None:  # type: ignore[no-untyped-def]
    base = kb.create_base("crash", embedding_model_id=OLD, file_processor_id=None)
    kb.add(base.id, [AddInput.note(f"note {i} with shared words") for i in range(200)], wait=True)
    everything = bodies(kb, base.id)
    kb.set_embedding_model(base.id, NEW)
    worker = workers(kb_settings.home)

    def built_some() -> bool:
        s = kb.model_switch(base.id) or {}
        return (s.get("progress") or {}).get("done", 0) >= 64

    wait_until(built_some, 60, "the switch mid-build in the worker")
    worker.kill()
    # The old model serves, whole: every body found by its vectors; the shadow is partial.
    after_kill = kb.get_base(base.id)
    assert (after_kill.embedding_model_id, after_kill.dimensions) == (OLD, 32)
    store = kb.rt.store(after_kill)
    assert set(store.models.vectors_for(everything, OLD)) == everything
    shadow = set(store.models.vectors_for(everything, NEW))
    assert 64 <= len(shadow) < len(everything)
    response = kb.search(base.id, "shared words")
    lane = response.explain["dense_lane"]
    assert lane["used"] and lane["hits"] > 0
    assert kb.model_switch(base.id)["status"] == "running"  # type: ignore[index]

    # Restart: recovery hands the switch (recovery "retry") to this process's workers.
    with Knowledge(kb_settings) as again:
        again.start_workers()
        wait_until(
            lambda: (again.model_switch(base.id) or {}).get("status") == "completed",
            90,
            "the resumed switch",
        )
        again.stop_workers()
        progress = again.model_switch(base.id)["progress"]  # type: ignore[index]
        assert progress["total"] < len(everything)  # resumed: the kept shadow was not redone
        base_now = again.get_base(base.id)
        assert (base_now.embedding_model_id, base_now.dimensions) == (NEW, 48)
        new_store = again.rt.store(base_now)
        assert set(new_store.models.vectors_for(everything, NEW)) == everything
        assert new_store.models.vectors_for(everything, OLD) == {}
