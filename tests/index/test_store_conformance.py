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
from knowbase.index.base import IndexStore, MaterialInput
from knowbase.search.rrf import rrf_fuse
from knowbase.units.chunk import Chunk
from knowbase.units.hashing import text_hash

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
        from knowbase.index.sqlite.store import SqliteIndexStore

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
        from knowbase.index.qdrant.store import QdrantIndexStore, connect
        from knowbase.index.sqlite.store import SqliteIndexStore

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
        from knowbase.index.postgres.store import PostgresIndexStore

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


# --- search filters: ``within`` inside both lanes (issue 15 item 5) ----------------------------
def _scoped_store(store_factory: Factory) -> tuple[IndexStore, np.ndarray]:
    """40 ``b*`` units near the query and first in the keyword lane, 3 ``r*`` units last."""
    store = store_factory()
    rng = np.random.default_rng(3)
    query = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    for n in range(43):
        rare = n >= 40
        mid = f"r{n - 40}" if rare else f"b{n:02d}"
        text = f"apple {'pear ' * 8 if rare else 'apple '}{mid}"
        vec = (np.array([0.1, 1.0, 0.0, 0.0]) if rare else query) + rng.normal(0, 0.01, DIMS)
        m = MaterialInput(mid, f"{mid}.md", text, [Chunk(text, 0, len(text), 0, {"page": 1})])
        store.rebuild_material(m, {text_hash(text): vec.astype(np.float32)})
    return store, query


def test_within_restricts_both_lanes_before_the_cut(store_factory: Factory) -> None:
    store, query = _scoped_store(store_factory)
    rare = frozenset({"r0", "r1", "r2"})
    assert {h.material_id for h in store.keyword_lane("apple", 10)}.isdisjoint(rare)
    assert {h.material_id for h in store.vector_lane(query, 10)}.isdisjoint(rare)
    for limit in (2, 10):
        keyword = store.keyword_lane("apple", limit, within=rare)
        vector = store.vector_lane(query, limit, within=rare)
        assert len(keyword) == len(vector) == min(limit, 3)
        assert {h.material_id for h in keyword} <= rare and {h.material_id for h in vector} <= rare
        # a scoped lane is the unscoped lane's order restricted to the scope
        full = [h for h in store.keyword_lane("apple", 100) if h.material_id in rare]
        assert keyword == full[:limit]
    hits = store.keyword_search("apple", 10, within=rare)
    assert [h.unit_id for h in hits] == [h.unit_id for h in store.keyword_lane(
        "apple", 10, within=rare)]  # fmt: skip
    assert all(h.text.startswith("apple pear") and h.locator == {"page": 1} for h in hits)
    vhits = store.vector_search(query, 10, within=rare)
    assert sorted(h.relative_path for h in vhits) == ["r0.md", "r1.md", "r2.md"]
    assert [h.score for h in vhits] == sorted((h.score for h in vhits), reverse=True)


def test_within_nothing_or_unknown_ids_finds_nothing(store_factory: Factory) -> None:
    store, query = _scoped_store(store_factory)
    for within in (frozenset(), frozenset({"no-such-material"})):
        assert store.keyword_lane("apple", 10, within=within) == []
        assert store.vector_lane(query, 10, within=within) == []
        assert store.keyword_search("apple", 10, within=within) == []
    both = frozenset({"b07", "no-such-material"})
    assert [h.material_id for h in store.vector_lane(query, 10, within=both)] == ["b07"]


def test_within_on_the_cjk_and_single_character_paths(store_factory: Factory) -> None:
    """The bigram MATCH with its single-character LIKE filter, and the LIKE fallback."""
    store = store_factory(dims=None)
    docs = {"a": "羊驼的毛很柔软", "b": "羊驼毛比羊毛更暖和", "c": "山羊"}
    for mid, text in docs.items():
        store.rebuild_material(material(mid, text, size=50, path=f"资料/{mid}.md"), {})
    assert {h.material_id for h in store.keyword_lane("羊驼毛", 10)} >= {"a", "b"}
    assert [h.material_id for h in store.keyword_lane("羊驼毛", 10, within=frozenset("b"))] == ["b"]
    assert {h.material_id for h in store.keyword_lane("羊", 10)} == {"a", "b", "c"}  # LIKE
    assert [h.material_id for h in store.keyword_lane("羊", 10, within=frozenset("c"))] == ["c"]


def test_hits_for_keeps_the_order_and_skips_units_gone(store_factory: Factory) -> None:
    store, query = _scoped_store(store_factory)
    lane = store.keyword_lane("apple", 3)
    pairs = [(h.unit_id, h.score) for h in reversed(lane)] + [("no-such-unit", 1.0)]
    hits = store.hits_for(pairs)
    assert [(h.unit_id, h.score) for h in hits] == pairs[:3]
    assert store.hits_for([]) == []
