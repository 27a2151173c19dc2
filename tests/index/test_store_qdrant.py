"""The qdrant backend's own cases. No Qdrant server can run here: the conformance suite uses
qdrant-client's local mode; these check the registry wiring and an unreachable server."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowbase.errors import VectorStoreUnavailable
from knowbase.index import backends
from knowbase.index.base import MaterialInput
from knowbase.units.chunk import Chunk
from knowbase.units.hashing import text_hash

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

    from knowbase.index.qdrant.store import point_id

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
    from knowbase.service import Knowledge
    from knowbase.service.readiness import readiness
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


# --- vector sets by model id (a model switch's shadow set) ------------------------------------
TEXT = "alpha beta gamma delta"


def _material(mid: str = "m1", text: str = TEXT) -> MaterialInput:
    return MaterialInput(mid, f"{mid}.md", text, [Chunk(text, 0, len(text), 0)])


def _vectors(m: MaterialInput, dims: int) -> dict[str, np.ndarray]:
    from knowbase.providers.hashing_provider import hash_vector

    return {text_hash(c.text): hash_vector(c.text, dims) for c in m.chunks}


@pytest.fixture(params=["sqlite", "postgres"])
def qstore(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A qdrant store serving model ``old`` (8 wide) over a BM25-only store of either kind the
    backend uses: SQLite (embedded home) or PostgreSQL (catalog on PostgreSQL)."""
    from knowbase.index.qdrant.store import QdrantIndexStore, connect

    catalog = None
    if request.param == "sqlite":
        from knowbase.index.sqlite.store import SqliteIndexStore

        base_id = "b1"
        inner = SqliteIndexStore.open(tmp_path / "index.sqlite", base_id=base_id, dims=None)
    else:
        from knowbase.catalog import bases as base_repo
        from knowbase.catalog.db import Catalog
        from knowbase.index.postgres.store import PostgresIndexStore

        catalog = Catalog(request.getfixturevalue("pg_url"))
        with catalog.write_tx() as conn:  # the index rows hang off a base row
            base_id = base_repo.insert(conn, name="q").id
        inner = PostgresIndexStore.open(catalog.engine, base_id=base_id, dims=None)
    client = connect(":memory:")
    store = QdrantIndexStore.open(client, inner, base_id=base_id, dims=8, model_id="old")
    yield store
    store.close()
    client.close()
    if catalog is not None:
        catalog.dispose()


def _points(store) -> list:  # type: ignore[no-untyped-def]
    from qdrant_client import models

    mine = models.Filter(
        must=[models.FieldCondition(key="base_id", match=models.MatchValue(value=store.base_id))]
    )
    return [
        p
        for c in store.client.get_collections().collections
        for p in store.client.scroll(c.name, scroll_filter=mine, limit=1000)[0]
    ]


def test_two_models_sets_live_side_by_side(qstore) -> None:  # type: ignore[no-untyped-def]
    from knowbase.errors import EmbeddingMismatch, InvalidInput
    from knowbase.providers.hashing_provider import hash_vector

    m = _material()
    h = text_hash(TEXT)
    qstore.rebuild_material(m, _vectors(m, 8))
    assert qstore.models.bodies_without_vectors("new") == {h: TEXT}
    assert qstore.models.existing_vectors("new", [h]) == set()
    with pytest.raises(EmbeddingMismatch):
        qstore.models.put_vectors("new", 12, {h: np.ones(8, "<f4")})  # wrong width for the set
    qstore.models.put_vectors("new", 12, {h: hash_vector(TEXT, 12)})
    assert qstore.models.bodies_without_vectors("new") == {}
    assert qstore.models.existing_vectors("new", [h]) == {h}
    assert set(qstore.models.vectors_for([h], "new")) == {h}
    assert qstore.models.vectors_for([h], "new")[h].shape == (12,)
    # The serving lane is the store's model, whatever else Qdrant holds.
    assert [x.material_id for x in qstore.vector_search(hash_vector(TEXT, 8), 3)] == ["m1"]
    shadow = qstore.for_model("new", 12)
    assert shadow.vector_search(hash_vector(TEXT, 12), 3)[0].material_id == "m1"
    shadow.close()  # shares the inner store: closing it leaves that open
    assert qstore.keyword_search("alpha", 3)[0].material_id == "m1"
    with pytest.raises(InvalidInput):
        qstore.models.drop_vectors("old")  # the serving set
    assert qstore.models.drop_vectors("new") == 1
    assert qstore.models.vectors_for([h], "new") == {}
    assert {p.payload["model_id"] for p in _points(qstore)} == {"old"}


def test_a_set_covers_units_not_bodies(qstore) -> None:  # type: ignore[no-untyped-def]
    """A unit written after its body got a shadow vector has no point of the shadow set yet:
    it is reported missing until the switch gives it one."""
    from knowbase.providers.hashing_provider import hash_vector

    a = _material("a", "same body")
    qstore.rebuild_material(a, _vectors(a, 8))
    h = text_hash("same body")
    qstore.models.put_vectors("new", 4, {h: hash_vector("same body", 4)})
    assert qstore.models.bodies_without_vectors("new") == {}
    b = _material("b", "same body")  # an index job writes it meanwhile (old model only)
    qstore.rebuild_material(b, _vectors(b, 8))
    assert qstore.models.bodies_without_vectors("new") == {h: "same body"}
    assert qstore.models.existing_vectors("new", [h]) == set()  # so the switch embeds it again
    qstore.models.put_vectors("new", 4, {h: hash_vector("same body", 4)})
    assert qstore.models.bodies_without_vectors("new") == {}
    shadow = qstore.for_model("new", 4)
    hits = shadow.vector_search(hash_vector("same body", 4), 5)
    assert sorted(x.material_id for x in hits) == ["a", "b"]
    # A rebuild or delete takes the shadow points of units gone with it (every set).
    qstore.delete_materials(["a"])
    assert [x.material_id for x in shadow.vector_search(hash_vector("same body", 4), 5)] == ["b"]
    assert {p.payload["material_id"] for p in _points(qstore)} == {"b"}
    shadow.close()


def test_replace_units_needs_the_new_models_vectors(qstore) -> None:  # type: ignore[no-untyped-def]
    from knowbase.errors import EmbeddingMismatch
    from knowbase.providers.hashing_provider import hash_vector

    m = _material()
    qstore.rebuild_material(m, _vectors(m, 8))
    halves = [Chunk("alpha beta", 0, 10, 0), Chunk("gamma delta", 11, 22, 1)]
    split = MaterialInput("m1", "m1.md", TEXT, halves)
    version = qstore.changes_version()
    with pytest.raises(EmbeddingMismatch):
        qstore.models.replace_units([split], "new")
    assert [u.text for u in qstore.list_units("m1")] == [TEXT]  # nothing changed
    assert qstore.changes_version() == version
    qstore.models.put_vectors("new", 4, {text_hash(c.text): hash_vector(c.text, 4) for c in halves})
    # The halves are no stored unit's bodies yet: body points, which no lane shows.
    assert all(
        not p.payload.get("unit_id") for p in _points(qstore) if p.payload["model_id"] == "new"
    )
    qstore.models.replace_units([split], "new")
    assert [u.text for u in qstore.list_units("m1")] == ["alpha beta", "gamma delta"]
    assert qstore.changes_version() > version
    shadow = qstore.for_model("new", 4)
    assert [x.text for x in shadow.vector_search(hash_vector("gamma delta", 4), 1)] == [
        "gamma delta"
    ]
    shadow.close()
    # The serving model's points of the replaced unit are gone with it.
    old = [p for p in _points(qstore) if p.payload["model_id"] == "old"]
    assert old == []


def test_a_bm25_only_base_is_a_qdrant_store_that_connects_on_its_first_set(
    tmp_path: Path,
) -> None:
    """Enable-embedding on a BM25-only qdrant base: the store opens without Qdrant (no
    collection, no local-mode folder); the switch's vectors land in Qdrant, and the base
    reopened with the model finds them."""
    from knowbase.index.qdrant.store import QdrantIndexStore
    from knowbase.providers.hashing_provider import hash_vector

    path = tmp_path / ".kb" / "index.sqlite"
    try:
        store = backends.get("qdrant").open(backends.StoreTarget("b4", None, path), True)
        assert isinstance(store, QdrantIndexStore) and store.dims is None
        m = _material()
        store.rebuild_material(m, {})
        assert store.vector_search(np.ones(4, "<f4"), 3) == []
        assert not (tmp_path / ".kb" / "qdrant").exists()
        h = text_hash(TEXT)
        assert store.models.bodies_without_vectors("hash:d4") == {h: TEXT}
        store.models.put_vectors("hash:d4", 4, {h: hash_vector(TEXT, 4)})
        assert store.models.bodies_without_vectors("hash:d4") == {}
        store.close()
        target = backends.StoreTarget("b4", 4, path, model_id="hash:d4")
        again = backends.get("qdrant").open(target, False)
        assert [x.material_id for x in again.vector_search(hash_vector(TEXT, 4), 3)] == ["m1"]
        assert [x.material_id for x in again.keyword_search("alpha", 3)] == ["m1"]
        again.close()
    finally:
        backends.close_qdrant_clients()


def _hammer(client: Any) -> list[BaseException]:
    """Four threads upsert while two search one local-mode collection; the errors raised."""
    import threading
    import uuid

    from qdrant_client import models

    from knowbase.index.qdrant.store import ensure_collection

    name = ensure_collection(client, 4)
    errors: list[BaseException] = []
    done = threading.Event()

    def upsert(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(40):
                points = [
                    models.PointStruct(
                        id=str(uuid.uuid4()), vector=rng.random(4).tolist(), payload={"s": seed}
                    )
                    for _ in range(10)
                ]
                client.upsert(name, points)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    def search() -> None:
        try:
            while not done.is_set():
                client.query_points(name, query=[0.1, 0.2, 0.3, 0.4], limit=5)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    writers = [threading.Thread(target=upsert, args=(i,)) for i in range(4)]
    readers = [threading.Thread(target=search) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join(60)
    done.set()
    for t in readers:
        t.join(60)
    if not errors and client.count(name).count != 4 * 40 * 10:
        errors.append(AssertionError(f"{client.count(name).count} points, not 1600"))
    return errors


def test_local_mode_takes_one_call_at_a_time(tmp_path: Path) -> None:
    """qdrant-client's local mode has no lock (qdrant/qdrant-client#1193): concurrent upserts
    and searches corrupt its arrays. ``connect`` serialises a local client's calls."""
    from knowbase.index.qdrant.store import connect

    client = connect(str(tmp_path / "q"))
    try:
        assert _hammer(client) == []
    finally:
        client.close()
