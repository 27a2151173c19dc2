"""The qdrant backend's own cases. No Qdrant server can run here: the conformance suite uses
qdrant-client's local mode; these check the registry wiring and an unreachable server."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np
import pytest

from knowbase.errors import VectorStoreUnavailable
from knowbase.pipeline.documents import Chunk
from knowbase.pipeline.store import backends
from knowbase.pipeline.store.base import MaterialInput
from knowbase.pipeline.store.hashing import text_hash

pytest.importorskip("qdrant_client")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once we return: nothing listens there


def test_an_unreachable_qdrant_is_unavailable_not_a_hang(tmp_path: Path) -> None:
    target = backends.StoreTarget(
        "b1", 4, tmp_path / "index.sqlite", None, f"http://127.0.0.1:{_closed_port()}"
    )
    started = time.monotonic()
    with pytest.raises(VectorStoreUnavailable) as err:
        backends.get("qdrant").open(target, True)
    assert time.monotonic() - started < 15
    assert err.value.code == "vector_store_unavailable"


def test_local_mode_next_to_the_index_file_survives_a_reopen(tmp_path: Path) -> None:
    target = backends.StoreTarget("b2", 4, tmp_path / ".kb" / "index.sqlite")
    store = backends.get("qdrant").open(target, True)
    text = "otters hold hands"
    store.rebuild_material(
        MaterialInput("m", "m.md", text, [Chunk(text, 0, len(text), 0)]),
        {text_hash(text): np.array([1, 2, 3, 4], dtype=np.float32)},
    )
    store.close()
    again = backends.get("qdrant").open(target, False)
    assert [h.material_id for h in again.vector_search(np.array([1, 2, 3, 4.0]), 3)] == ["m"]
    assert [h.material_id for h in again.keyword_search("otters", 3)] == ["m"]
    assert (tmp_path / ".kb" / "qdrant").is_dir()
    again.close()
    backends.close_qdrant_clients()


def test_points_are_keyed_by_model_and_old_points_are_labelled_in_place(tmp_path: Path) -> None:
    from qdrant_client import models

    from knowbase.pipeline.store.qdrant import point_id

    text = "otters hold hands"
    vec = np.array([1, 2, 3, 4], dtype=np.float32)
    m = MaterialInput("m", "m.md", text, [Chunk(text, 0, len(text), 0)])
    target = backends.StoreTarget("b3", 4, tmp_path / ".kb" / "index.sqlite", model_id="hash:a")
    store = backends.get("qdrant").open(target, True)
    store.rebuild_material(m, {text_hash(text): vec})
    # Rewrite the point as the layout before the model key wrote it: no model_id payload.
    client, collection = store.client, store.collection  # type: ignore[attr-defined]
    unit = store.list_units("m")[0].unit_id
    client.delete(
        collection, points_selector=models.PointIdsList(points=[point_id("b3", unit, "hash:a")])
    )
    client.upsert(collection, points=[models.PointStruct(
        id=point_id("b3", unit), vector=vec.tolist(),
        payload={"base_id": "b3", "material_id": "m", "unit_id": unit,
                 "embedding_text_hash": text_hash(text)})])  # fmt: skip
    store.close()
    again = backends.get("qdrant").open(target, False)
    assert [h.material_id for h in again.vector_search(vec, 3)] == ["m"]  # labelled, kept
    other = backends.get("qdrant").open(
        backends.StoreTarget("b3", 4, tmp_path / ".kb" / "index.sqlite", model_id="hash:b"), False
    )
    assert other.vector_search(vec, 3) == []  # another model of the same width: its own set
    again.rebuild_material(m, {text_hash(text): vec})  # the old-id point is replaced
    points, _ = client.scroll(collection, limit=10, with_payload=True)
    assert [(p.id, p.payload["model_id"]) for p in points] == [
        (point_id("b3", unit, "hash:a"), "hash:a")
    ]


def test_a_qdrant_server_that_goes_away_is_unavailable_and_fails_items_with_the_code(
    tmp_path: Path,
) -> None:
    """Settings.qdrant_url reaches the store: a base whose Qdrant server stops answering is
    ``unavailable`` in readiness with the reason, its new items fail ``vector_store_unavailable``
    within the client timeout (never a hang), and the base itself is not failed for good."""
    from knowbase.readiness import readiness
    from knowbase.service import Knowledge
    from knowbase.settings import Settings, load_settings

    home = tmp_path / "home"
    try:
        with Knowledge(Settings(home=home, test_providers=True)) as kb:  # local mode
            kb.create_base("q", embedding_model_id="hash:d8", index_backend="qdrant")
            assert kb.get_item("q", kb.add_note("q", "Comets have icy tails.").id).status == (
                "completed"
            )
        backends.close_qdrant_clients()
        down = f"http://127.0.0.1:{_closed_port()}"
        settings = load_settings(home, test_providers=True, qdrant_url=down)
        assert settings.qdrant_url == down
        with Knowledge(settings) as kb:
            report = readiness(kb)
            index = [c for c in report["components"] if c["component"] == "index"]
            assert index and index[0]["status"] == "unavailable"
            assert "vector_store_unavailable" in index[0]["reason"]
            started = time.monotonic()
            item = kb.get_item("q", kb.add_note("q", "Otters hold hands.").id)
            assert time.monotonic() - started < 60
            assert (item.status, item.error_code) == ("failed", "vector_store_unavailable")
            assert kb.get_base("q").status != "failed"
    finally:
        backends.close_qdrant_clients()
