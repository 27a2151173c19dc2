"""One conformance suite for every index backend: the same invariants through ``IndexStore``.

``store_factory`` is parametrized over the backends (``sqlite``: a file under ``tmp_path``;
``postgres``: a fresh database of the embedded PostgreSQL 18 with pgvector, see
``tests/pg_server.py``; ``qdrant``: vectors in qdrant-client's local mode — no Qdrant server can
run here — with chunks and the keyword lane in SQLite). A test here names no backend; a
backend's own internals are tested in its own file (``test_store_sqlite.py`` …).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowbase.errors import Conflict, EmbeddingMismatch, InvalidInput
from knowbase.pipeline.documents import Chunk
from knowbase.pipeline.store.base import IndexStore, MaterialInput
from knowbase.pipeline.store.hashing import text_hash
from knowbase.pipeline.store.rrf import rrf_fuse

DIMS = 4
Factory = Callable[..., IndexStore]


def chunks_of(text: str, size: int) -> list[Chunk]:
    return [
        Chunk(text[i : i + size], i, min(i + size, len(text)), n, {"page": n + 1})
        for n, i in enumerate(range(0, len(text), size))
    ]


def words_material(mid: str, words: list[str]) -> MaterialInput:
    """One chunk per word (so each word is one unit)."""
    text = " ".join(words)
    chunks, pos = [], 0
    for i, w in enumerate(words):
        chunks.append(Chunk(w, pos, pos + len(w), i))
        pos += len(w) + 1
    return MaterialInput(mid, f"{mid}.md", text, chunks, title=f"title {mid}")


def fake_vec(body: str) -> np.ndarray:
    data = body.encode()
    return np.array([sum(data[i::DIMS]) % 97 + 1.0 for i in range(DIMS)], dtype=np.float32)


def add(store: IndexStore, m: MaterialInput) -> None:
    emb = {text_hash(c.text): fake_vec(c.text) for c in m.chunks} if store.dims else {}
    store.rebuild_material(m, emb)


def material(mid: str, text: str, size: int = 20, path: str | None = None) -> MaterialInput:
    rel = f"{mid}.md" if path is None else path
    return MaterialInput(mid, rel, text, chunks_of(text, size), title=mid)


@pytest.fixture(params=["sqlite", "postgres", "qdrant"])
def store_factory(request: pytest.FixtureRequest, tmp_path) -> Iterator[Factory]:
    """``factory(dims=…)`` opens a new, empty store of this backend (closed at teardown)."""
    opened: list[IndexStore] = []
    if request.param == "sqlite":
        from knowbase.pipeline.store.sqlite import SqliteIndexStore

        def factory(dims: int | None = DIMS) -> IndexStore:
            base_id = uuid.uuid4().hex[:12]
            store = SqliteIndexStore.open(
                tmp_path / f"{base_id}.sqlite", base_id=base_id, dims=dims
            )
            opened.append(store)
            return store

        yield factory
    elif request.param == "qdrant":
        # No Qdrant server runs here: the client's local (in-process) mode, chunks and keyword
        # lane in a BM25-only SQLite store, as the qdrant backend does on an embedded home.
        pytest.importorskip("qdrant_client")
        from knowbase.pipeline.store.qdrant import QdrantIndexStore, connect
        from knowbase.pipeline.store.sqlite import SqliteIndexStore

        client = connect(":memory:")

        def factory(dims: int | None = DIMS) -> IndexStore:
            base_id = uuid.uuid4().hex[:12]
            inner = SqliteIndexStore.open(
                tmp_path / f"{base_id}.sqlite", base_id=base_id, dims=None
            )
            opened.append(inner)
            if dims is None:
                return inner
            return QdrantIndexStore.open(client, inner, base_id=base_id, dims=dims)

        yield factory
        client.close()
    else:
        server = request.getfixturevalue("pg_server")
        if not server.has_vector:
            pytest.skip("pgvector is not built for the embedded PostgreSQL: run .ci/pgvector.sh")
        url = request.getfixturevalue("pg_url")
        from knowbase.catalog import bases as base_repo
        from knowbase.catalog.db import Catalog
        from knowbase.pipeline.store.postgres import PostgresIndexStore

        catalog = Catalog(url)

        def factory(dims: int | None = DIMS) -> IndexStore:
            with catalog.write_tx() as conn:  # the index rows hang off a base row
                model = "hash:test" if dims else None
                base = base_repo.insert(
                    conn, name=uuid.uuid4().hex, embedding_model_id=model, dimensions=dims
                )
            store = PostgresIndexStore.open(catalog.engine, base_id=base.id, dims=dims)
            opened.append(store)
            return store

        yield factory
        catalog.dispose()
    for store in opened:
        store.close()


@pytest.fixture
def vstore(store_factory: Factory) -> IndexStore:
    return store_factory(DIMS)


@pytest.fixture
def kstore(store_factory: Factory) -> IndexStore:
    return store_factory(None)


TEXT_A = "Alpha beta gamma delta. Epsilon zeta eta theta. Iota kappa lambda mu."
TEXT_B = "Nu xi omicron pi. Rho sigma tau upsilon. Phi chi psi omega."


# --- rebuild, slices, reads ---------------------------------------------------------------------
def test_rebuild_then_every_read_sees_it(vstore: IndexStore) -> None:
    m = material("m1", TEXT_A)
    add(vstore, m)
    assert vstore.material_ids() == {"m1"}
    assert vstore.material_path("m1") == "m1.md"
    assert vstore.material_by_path("m1.md") == "m1"
    assert vstore.content_text("m1") == TEXT_A
    units = vstore.list_units("m1")
    assert [u.unit_index for u in units] == list(range(len(m.chunks)))
    assert all(TEXT_A[u.char_start : u.char_end] == u.text for u in units)
    assert units[0].locator == {"page": 1}
    hit = vstore.keyword_search("epsilon", 5)[0]
    assert (hit.material_id, hit.relative_path, hit.title) == ("m1", "m1.md", "m1")
    assert TEXT_A[hit.char_start : hit.char_end] == hit.text
    assert "Epsilon" in hit.text


def test_every_change_bumps_the_version(vstore: IndexStore) -> None:
    v0 = vstore.changes_version()
    add(vstore, material("m1", TEXT_A))
    v1 = vstore.changes_version()
    vstore.delete_materials(["m1"])
    v2 = vstore.changes_version()
    vstore.delete_materials(["nothing-here"])
    assert v0 < v1 < v2 == vstore.changes_version()


def test_replace_swaps_all_units_at_once(vstore: IndexStore) -> None:
    add(vstore, material("m1", TEXT_A))
    add(vstore, material("m1", TEXT_B, path="moved.md"))
    assert vstore.keyword_search("epsilon", 5) == []
    assert [h.relative_path for h in vstore.keyword_search("omicron", 5)] == ["moved.md"]
    assert vstore.content_text("m1") == TEXT_B
    assert vstore.material_by_path("m1.md") is None


# --- atomic rebuild ------------------------------------------------------------------------------
def test_a_failed_rebuild_leaves_the_previous_state(vstore: IndexStore) -> None:
    add(vstore, material("m1", TEXT_A))
    before = (vstore.list_units("m1"), vstore.changes_version())
    with pytest.raises(EmbeddingMismatch):
        vstore.rebuild_material(material("m1", TEXT_B), {})  # no vectors for the new bodies
    assert (vstore.list_units("m1"), vstore.changes_version()) == before
    assert vstore.content_text("m1") == TEXT_A


def test_bad_inputs_raise_before_any_write(vstore: IndexStore, kstore: IndexStore) -> None:
    bad = MaterialInput("m1", "a.md", "short", [Chunk("short!", 0, 6, 0)])
    with pytest.raises(InvalidInput):
        vstore.rebuild_material(bad, {})
    with pytest.raises(InvalidInput):
        kstore.rebuild_material(material("k", TEXT_A), {text_hash("x"): [1.0] * DIMS})
    m = material("m2", TEXT_A)
    wrong = {text_hash(c.text): [1.0, 2.0] for c in m.chunks}
    with pytest.raises(EmbeddingMismatch):
        vstore.rebuild_material(m, wrong)
    assert vstore.material_ids() == set() and kstore.material_ids() == set()


def test_a_path_of_another_material_conflicts(vstore: IndexStore) -> None:
    add(vstore, material("m1", TEXT_A, path="same.md"))
    with pytest.raises(Conflict):
        add(vstore, material("m2", TEXT_B, path="same.md"))
    assert vstore.material_ids() == {"m1"}


@pytest.mark.parametrize("bad", ["", "/abs.md", ".kb", ".kb/index.sqlite"])
def test_reserved_and_absolute_paths_are_refused(vstore: IndexStore, bad: str) -> None:
    with pytest.raises(InvalidInput):
        add(vstore, material("m1", TEXT_A, path=bad))


# --- delete and GC ----------------------------------------------------------------------------
def test_delete_collects_what_only_it_used(vstore: IndexStore) -> None:
    shared = "Shared sentence here!"
    add(vstore, material("m1", shared + " only in one", size=len(shared)))
    add(vstore, material("m2", shared + " only in two", size=len(shared)))
    h_shared, h_one = text_hash(shared), text_hash(" only in one")
    assert vstore.existing_embedding_hashes([h_shared, h_one]) == {h_shared, h_one}
    vstore.delete_materials(["m1"])
    assert vstore.existing_embedding_hashes([h_shared, h_one]) == {h_shared}  # m2 still uses it
    assert vstore.content_text("m1") is None
    assert vstore.material_ids() == {"m2"}
    vstore.delete_materials(["m2"])
    assert vstore.existing_embedding_hashes([h_shared]) == set()
    assert vstore.keyword_search("shared", 5) == []


def test_delete_many_at_once(kstore: IndexStore) -> None:
    for i in range(30):
        add(kstore, material(f"m{i}", f"word{i} common text"))
    kstore.delete_materials([f"m{i}" for i in range(0, 30, 2)])
    assert kstore.material_ids() == {f"m{i}" for i in range(1, 30, 2)}
    assert {h.material_id for h in kstore.keyword_search("common", 100)} == kstore.material_ids()


# --- keyword lane ---------------------------------------------------------------------------
def test_cjk_bigrams_single_chars_and_mixed_queries(kstore: IndexStore) -> None:
    add(kstore, material("zh", "机器学习是人工智能的一个分支", size=100))
    add(kstore, material("ja", "東京タワーに行きました", size=100))
    add(kstore, material("en", "machine learning rocks", size=100))
    assert [h.material_id for h in kstore.keyword_search("学习", 5)] == ["zh"]
    assert [h.material_id for h in kstore.keyword_search("タワー", 5)] == ["ja"]
    assert [h.material_id for h in kstore.keyword_search("智", 5)] == ["zh"]  # LIKE fallback
    mixed = {h.material_id for h in kstore.keyword_search("learning 学习", 5)}
    assert mixed == {"zh", "en"}
    assert kstore.keyword_search("!!!", 5) == []


def test_stemming_and_case_fold(kstore: IndexStore) -> None:
    add(kstore, material("m", "The runners were running quickly", size=100))
    assert [h.material_id for h in kstore.keyword_search("RUN", 5)] == ["m"]
    assert [h.material_id for h in kstore.keyword_search("runner", 5)] == ["m"]


def test_bm25_prefers_rarer_terms_and_shorter_units(kstore: IndexStore) -> None:
    add(kstore, words_material("a", ["apple banana", "apple", "apple cherry", "durian apple"]))
    hits = kstore.keyword_search("apple durian", 10)
    assert hits[0].text == "durian apple"  # the rare term wins
    assert hits[1].text == "apple"  # then the shortest unit with the common one
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


@settings(max_examples=15, deadline=None)
@given(
    docs=st.lists(
        st.lists(st.sampled_from(["cat", "dog", "eel", "fox", "gnu", "学习", "猫"]), max_size=5),
        min_size=1,
        max_size=12,
    ),
    query=st.sampled_from(["cat", "dog eel", "fox gnu cat", "学习", "猫", "猫 cat"]),
    short=st.integers(1, 5),
)
def test_a_shorter_limit_is_a_prefix_of_a_longer_one(
    store_factory: Factory, docs: list[list[str]], query: str, short: int
) -> None:
    store = store_factory(None)
    for i, words in enumerate(docs):
        add(store, words_material(f"m{i}", [" ".join(words) or "empty"]))
    long = [h.unit_id for h in store.keyword_search(query, 50)]
    assert [h.unit_id for h in store.keyword_search(query, short)] == long[:short]


# --- vector lane ------------------------------------------------------------------------------
def test_vector_lane_is_cosine_with_ties_by_unit_id(vstore: IndexStore) -> None:
    words = [f"w{i}" for i in range(12)]
    m = words_material("m", words)
    rng = np.random.default_rng(7)
    vecs = {text_hash(w): rng.normal(size=DIMS).astype(np.float32) for w in words}
    vstore.rebuild_material(m, vecs)
    q = rng.normal(size=DIMS).astype(np.float32)
    hits = vstore.vector_search(q, 5)
    mat = np.stack([vecs[text_hash(w)] for w in words])
    cos = mat @ q / (np.linalg.norm(mat, axis=1) * np.linalg.norm(q))
    expected = [words[i] for i in np.argsort(-cos)[:5]]
    assert [h.text for h in hits] == expected
    assert [round(h.score, 4) for h in hits] == [round(float(c), 4) for c in sorted(cos)[::-1][:5]]
    assert vstore.vector_search(np.zeros(DIMS, dtype=np.float32), 5) == []
    with pytest.raises(EmbeddingMismatch):
        vstore.vector_search(np.ones(DIMS + 1, dtype=np.float32), 5)


def test_equal_bodies_share_a_vector_but_are_separate_hits(vstore: IndexStore) -> None:
    add(vstore, words_material("a", ["same body"]))
    add(vstore, words_material("b", ["same body"]))
    hits = vstore.vector_search(fake_vec("same body"), 5)
    assert sorted(h.material_id for h in hits) == ["a", "b"]
    assert all(h.score == pytest.approx(1.0, abs=1e-5) for h in hits)


def test_bm25_only_store_has_no_vector_lane(kstore: IndexStore) -> None:
    add(kstore, material("m", TEXT_A))
    assert kstore.vector_search(np.ones(DIMS, dtype=np.float32), 5) == []
    assert kstore.existing_embedding_hashes([text_hash("x")]) == set()


# --- fusion over the lanes (the query layer's RRF on this backend's lists) ------------------------
def test_rrf_over_both_lanes_is_backend_independent(vstore: IndexStore) -> None:
    words = ["alpha beta", "beta gamma", "gamma delta", "delta alpha", "epsilon"]
    add(vstore, words_material("m", words))
    vhits = vstore.vector_search(fake_vec("beta gamma"), 5)
    khits = vstore.keyword_search("beta", 5)
    fused = rrf_fuse([([h.unit_id for h in vhits], 0.5), ([h.unit_id for h in khits], 0.5)])
    by_id = {h.unit_id: h.text for h in [*vhits, *khits]}
    assert by_id[fused[0][0]] == "beta gamma"  # first in both lanes
