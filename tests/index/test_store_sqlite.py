"""SqliteIndexStore on real files: schema, rebuild atomicity, GC, delete, reclaim, mounting."""

from __future__ import annotations

import threading
from pathlib import Path

import apsw
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowbase.errors import (
    Conflict,
    EmbeddingMismatch,
    InvalidInput,
    VectorStoreUnavailable,
)
from knowbase.index.base import SCHEMA_VERSION, MaterialInput
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.units.chunk import Chunk
from knowbase.units.hashing import text_hash

DIMS = 4


def chunks_of(text: str, size: int) -> list[Chunk]:
    """Consecutive slices of ``text`` (the invariant every store unit keeps)."""
    return [
        Chunk(text[i : i + size], i, min(i + size, len(text)), n, {"page": n + 1})
        for n, i in enumerate(range(0, len(text), size))
    ]


def fake_vec(body: str) -> np.ndarray:
    """A deterministic tiny embedding: byte sums per position class, plus 1 so never zero."""
    data = body.encode()
    return np.array([sum(data[i::DIMS]) % 97 + 1.0 for i in range(DIMS)], dtype=np.float32)


def embeddings_for(chunks: list[Chunk]) -> dict[str, np.ndarray]:
    return {text_hash(c.text): fake_vec(c.text) for c in chunks}


def material(mid: str, path: str, text: str, size: int = 20) -> MaterialInput:
    return MaterialInput(mid, path, text, chunks_of(text, size), title=f"title {mid}")


def add(store: SqliteIndexStore, m: MaterialInput) -> None:
    store.rebuild_material(m, embeddings_for(list(m.chunks)) if store.dims else {})


def count(store: SqliteIndexStore, table: str) -> int:
    return store._writer.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@pytest.fixture
def index_path(tmp_path: Path) -> Path:
    return tmp_path / "base" / ".kb" / "index.sqlite"


@pytest.fixture
def vstore(index_path: Path):
    s = SqliteIndexStore.open(index_path, base_id="b1", dims=DIMS)
    yield s
    s.close()


@pytest.fixture
def kstore(tmp_path: Path):
    s = SqliteIndexStore.open(tmp_path / "bm25.sqlite", base_id="b2", dims=None)
    yield s
    s.close()


TEXT_A = "Alpha beta gamma delta. Epsilon zeta eta theta. Iota kappa lambda mu."
TEXT_B = "Nu xi omicron pi. Rho sigma tau upsilon. Phi chi psi omega."


# --- schema ------------------------------------------------------------------------------
def test_schema_objects_and_pragmas(vstore: SqliteIndexStore) -> None:
    names = {
        r[0]
        for r in vstore._writer.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table','index','trigger')"
        )
    }
    for name in ("meta", "content", "material", "search_unit", "search_text", "embedding"):
        assert name in names
    assert "search_text_fts" in names
    fts_sql = vstore._writer.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'search_text_fts'"
    ).fetchone()[0]
    assert "content=''" in fts_sql and "contentless_delete=1" in fts_sql
    assert "porter unicode61 remove_diacritics 2" in fts_sql
    conn = vstore._reader()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    meta = vstore._writer.execute("SELECT schema_version, base_id FROM meta").fetchone()
    assert meta == (SCHEMA_VERSION, "b1")


@pytest.mark.parametrize("bad", ["", "/abs.md", ".kb", ".kb/index.sqlite"])
def test_relative_path_checks(vstore: SqliteIndexStore, bad: str) -> None:
    with pytest.raises(InvalidInput):
        add(vstore, material("m1", bad, TEXT_A))
    assert vstore.material_ids() == set()


def test_relative_path_kb_prefix_only_refuses_the_reserved_dir(vstore: SqliteIndexStore) -> None:
    add(vstore, material("m1", ".kbnotes/a.md", TEXT_A))
    assert vstore.material_by_path(".kbnotes/a.md") == "m1"


def test_unit_checks_and_fk(vstore: SqliteIndexStore) -> None:
    add(vstore, material("m1", "a.md", TEXT_A))
    conn = vstore._writer
    row = conn.execute("SELECT unit_id, content_hash FROM search_unit LIMIT 1").fetchone()
    for sql in (
        "UPDATE search_unit SET unit_type = 'page' WHERE unit_id = ?",
        "UPDATE search_unit SET unit_index = -1 WHERE unit_id = ?",
        "UPDATE search_unit SET char_end = char_start - 1 WHERE unit_id = ?",
    ):
        with pytest.raises(apsw.ConstraintError):
            conn.execute(sql, (row[0],))
    with pytest.raises(apsw.ConstraintError):  # FK to material
        conn.execute("UPDATE search_unit SET material_id = 'nope' WHERE unit_id = ?", (row[0],))
    with pytest.raises(apsw.ConstraintError):
        conn.execute("UPDATE search_text SET kind = 'title'")
    with pytest.raises(apsw.ConstraintError):  # immutable text keeps FTS in sync
        conn.execute("UPDATE search_text SET text = 'x'")


def test_material_delete_cascades_to_units_text_and_fts(vstore: SqliteIndexStore) -> None:
    add(vstore, material("m1", "a.md", TEXT_A))
    assert count(vstore, "search_unit") > 0
    vstore._writer.execute("DELETE FROM material WHERE material_id = 'm1'")
    assert count(vstore, "search_unit") == 0
    assert count(vstore, "search_text") == 0
    assert vstore.keyword_search("alpha", 10) == []
    assert vstore.integrity_check() == "ok"


# --- rebuild -----------------------------------------------------------------------------
def test_rebuild_stores_slices_locators_and_vectors(vstore: SqliteIndexStore) -> None:
    m = material("m1", "docs/a.md", TEXT_A)
    add(vstore, m)
    units = vstore.list_units("m1")
    assert [u.unit_index for u in units] == list(range(len(m.chunks)))
    for u in units:
        assert TEXT_A[u.char_start : u.char_end] == u.text
        assert u.locator == {"page": u.unit_index + 1}
    assert vstore.content_text("m1") == TEXT_A
    assert vstore.material_path("m1") == "docs/a.md"
    assert vstore.material_by_path("docs/a.md") == "m1"
    assert vstore.material_by_path("docs/A.md") is None
    blob = vstore._writer.execute("SELECT vector_blob FROM embedding LIMIT 1").fetchone()[0]
    assert len(blob) == DIMS * 4
    stored = set(np.frombuffer(blob, dtype="<f4").tolist())
    assert stored <= {float(x) for c in m.chunks for x in fake_vec(c.text)}
    assert vstore.integrity_check() == "ok"


def test_failed_rebuild_leaves_previous_material_intact(vstore: SqliteIndexStore) -> None:
    add(vstore, material("m1", "a.md", TEXT_A))
    before_units = vstore.list_units("m1")
    before_version = vstore.changes_version()
    before_emb = count(vstore, "embedding")
    new = material("m1", "a.md", TEXT_B)
    partial = embeddings_for(list(new.chunks))
    partial.pop(next(iter(partial)))
    with pytest.raises(EmbeddingMismatch):
        vstore.rebuild_material(new, partial)
    assert vstore.list_units("m1") == before_units
    assert vstore.content_text("m1") == TEXT_A
    assert count(vstore, "embedding") == before_emb
    assert vstore.changes_version() == before_version
    assert [h.material_id for h in vstore.keyword_search("gamma", 5)] == ["m1"]
    assert vstore.keyword_search("omicron", 5) == []
    q = fake_vec(before_units[0].text)
    assert vstore.vector_search(q, 1)[0].unit_id == before_units[0].unit_id
    assert vstore.integrity_check() == "ok"


def test_slice_out_of_bounds_raises_before_any_write(vstore: SqliteIndexStore) -> None:
    bad = MaterialInput("m1", "a.md", "short", [Chunk("short!", 0, 6, 0)])
    with pytest.raises(InvalidInput):
        vstore.rebuild_material(bad, {})
    mismatched = MaterialInput("m1", "a.md", "short", [Chunk("shirt", 0, 5, 0)])
    with pytest.raises(InvalidInput):
        vstore.rebuild_material(mismatched, {})
    assert vstore.material_ids() == set()


def test_embeddings_on_bm25_only_store_raise(kstore: SqliteIndexStore) -> None:
    m = material("m1", "a.md", TEXT_A)
    with pytest.raises(InvalidInput):
        kstore.rebuild_material(m, embeddings_for(list(m.chunks)))
    kstore.rebuild_material(m, {})
    assert kstore.vector_search(np.ones(DIMS), 5) == []
    assert [h.material_id for h in kstore.keyword_search("kappa", 5)] == ["m1"]


def test_wrong_width_embedding_raises(vstore: SqliteIndexStore) -> None:
    m = material("m1", "a.md", TEXT_A)
    emb = {h: np.ones(DIMS + 1) for h in embeddings_for(list(m.chunks))}
    with pytest.raises(EmbeddingMismatch):
        vstore.rebuild_material(m, emb)


def test_path_taken_by_another_material_conflicts(vstore: SqliteIndexStore) -> None:
    add(vstore, material("m1", "a.md", TEXT_A))
    with pytest.raises(Conflict):
        add(vstore, material("m2", "a.md", TEXT_B))
    assert vstore.material_ids() == {"m1"}


def test_shared_content_and_embeddings_and_gc(vstore: SqliteIndexStore) -> None:
    add(vstore, material("m1", "a.md", TEXT_A))
    add(vstore, material("m2", "copy/a.md", TEXT_A))
    assert count(vstore, "content") == 1
    n_emb = count(vstore, "embedding")
    assert n_emb == len({c.text for c in chunks_of(TEXT_A, 20)})
    hashes = {text_hash(c.text) for c in chunks_of(TEXT_A, 20)}
    assert vstore.existing_embedding_hashes(hashes | {"f" * 64}) == hashes
    # m2 can be rebuilt from stored vectors alone (embedding reuse).
    vstore.rebuild_material(material("m2", "copy/a.md", TEXT_A), {})
    vstore.delete_materials(["m1"])
    assert count(vstore, "content") == 1 and count(vstore, "embedding") == n_emb
    add(vstore, material("m2", "copy/a.md", TEXT_B))  # content changed → GC drops TEXT_A
    assert count(vstore, "content") == 1
    assert vstore.content_text("m2") == TEXT_B
    assert vstore.existing_embedding_hashes(hashes) == set()
    assert vstore.integrity_check() == "ok"


def test_delete_materials_batched_and_version(vstore: SqliteIndexStore) -> None:
    for i in range(12):
        add(vstore, material(f"m{i}", f"d/{i}.md", f"{TEXT_A} number{i}"))
    v = vstore.changes_version()
    vstore.delete_materials([f"m{i}" for i in range(10)] + ["missing"])
    assert vstore.material_ids() == {"m10", "m11"}
    assert vstore.unit_material_ids() == {"m10", "m11"}
    assert vstore.changes_version() == v + 10
    assert count(vstore, "content") == 2
    assert {h.material_id for h in vstore.keyword_search("alpha", 50)} == {"m10", "m11"}
    assert vstore.integrity_check() == "ok"


def test_reclaim_threshold_and_vacuum_keeps_fts_aligned(vstore: SqliteIndexStore) -> None:
    big = " ".join(f"word{i} filler text number{i}" for i in range(4000))
    for i in range(6):
        add(vstore, material(f"m{i}", f"{i}.md", f"{big} unique{i}", size=400))
    add(vstore, material("keep", "keep.md", "Needle haystack marker text " * 3, size=30))
    vstore.delete_materials([f"m{i}" for i in range(6)])
    free = lambda: vstore._writer.execute("PRAGMA freelist_count").fetchone()[0]  # noqa: E731
    vstore.reclaim()  # default: needs ≥ 8 MiB free; this file is smaller → no VACUUM
    assert free() > 0
    before = {h.unit_id for h in vstore.keyword_search("needle", 10)}
    vstore.reclaim(min_bytes=0)
    assert free() == 0
    after = vstore.keyword_search("needle", 10)
    assert {h.unit_id for h in after} == before and after
    assert all("Needle" in h.text for h in after)
    assert vstore.keyword_search("unique3", 10) == []
    assert vstore.integrity_check() == "ok"


def test_reclaim_never_raises(vstore: SqliteIndexStore, caplog: pytest.LogCaptureFixture) -> None:
    big = " ".join(f"word{i} filler text number{i}" for i in range(4000))
    for i in range(4):
        add(vstore, material(f"m{i}", f"{i}.md", f"{big} unique{i}", size=400))
    add(vstore, material("keep", "keep.md", "Needle haystack marker text", size=30))
    vstore.delete_materials([f"m{i}" for i in range(4)])
    free = lambda: vstore._writer.execute("PRAGMA freelist_count").fetchone()[0]  # noqa: E731
    assert free() > 0
    # A statement in progress on the writer makes VACUUM fail: reclaim logs it and returns,
    # and the store is left as it was (nothing vacuumed, still searchable, intact).
    busy = vstore._writer.execute("SELECT content_hash FROM content")
    next(busy)
    with caplog.at_level("WARNING", logger="knowbase.index.sqlite.store"):
        vstore.reclaim(min_bytes=0)
    assert [r.getMessage() for r in caplog.records if "reclaim of" in r.getMessage()], caplog.text
    busy.close()
    assert free() > 0
    assert [h.material_id for h in vstore.keyword_search("needle", 5)] == ["keep"]
    assert vstore.integrity_check() == "ok"
    vstore.reclaim(min_bytes=0)  # once nothing holds it, the same call reclaims
    assert free() == 0
    # A closed connection is also only logged.
    caplog.clear()
    vstore._writer.close()
    with caplog.at_level("WARNING", logger="knowbase.index.sqlite.store"):
        vstore.reclaim(min_bytes=0)
    assert any("failed" in r.getMessage() for r in caplog.records), caplog.text


def test_fts_rowids_are_not_reused_into_ghost_hits(vstore: SqliteIndexStore) -> None:
    add(vstore, material("m1", "a.md", "apple banana cherry"))
    add(vstore, material("m1", "a.md", "durian elderberry fig"))
    assert vstore.keyword_search("apple", 5) == []
    assert [h.text for h in vstore.keyword_search("durian", 5)] == ["durian elderberry fi"]
    assert vstore.integrity_check() == "ok"


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["m1", "m2", "m3"]),
            st.sampled_from([TEXT_A, TEXT_B, TEXT_A + TEXT_B, "x"]),
            st.integers(3, 30),
            st.booleans(),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_slice_invariant_and_fts_sync_under_random_ops(tmp_path: Path, ops) -> None:
    path = tmp_path / f"h{abs(hash(str(ops)))}.sqlite"
    with SqliteIndexStore.open(path, base_id="h", dims=DIMS) as store:
        for mid, text, size, delete in ops:
            if delete:
                store.delete_materials([mid])
            else:
                add(store, MaterialInput(mid, f"{mid}.md", text, chunks_of(text, size)))
        for mid in store.material_ids():
            text = store.content_text(mid)
            for u in store.list_units(mid):
                assert text[u.char_start : u.char_end] == u.text
        assert store.integrity_check() == "ok"
        n_units = count(store, "search_unit")
        assert count(store, "search_text") == n_units
        assert len(store.vector_matrix().known) == n_units


# --- mounting ----------------------------------------------------------------------------
def test_base_id_mismatch_refuses_mount(vstore: SqliteIndexStore, index_path: Path) -> None:
    add(vstore, material("m1", "a.md", TEXT_A))
    with pytest.raises(VectorStoreUnavailable):
        SqliteIndexStore.open(index_path, base_id="other", dims=DIMS)
    assert vstore.material_ids() == {"m1"}


def test_missing_file_without_create(tmp_path: Path) -> None:
    with pytest.raises(VectorStoreUnavailable):
        SqliteIndexStore.open(tmp_path / "none.sqlite", base_id="b", dims=None, create=False)
    assert not (tmp_path / "none.sqlite").exists()


def test_corrupt_file_refused(tmp_path: Path) -> None:
    bad = tmp_path / "index.sqlite"
    bad.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(VectorStoreUnavailable):
        SqliteIndexStore.open(bad, base_id="b", dims=None)


def test_schema_version_mismatch_resets(vstore: SqliteIndexStore, index_path: Path) -> None:
    add(vstore, material("m1", "a.md", TEXT_A))
    vstore._writer.execute("UPDATE meta SET schema_version = 999")
    vstore.close()
    again = SqliteIndexStore.open(index_path, base_id="b1", dims=DIMS)
    try:
        assert again.was_reset
        assert again.material_ids() == set()
        assert again.keyword_search("alpha", 5) == []
        assert again.integrity_check() == "ok"
        add(again, material("m1", "a.md", TEXT_A))
        assert again.material_ids() == {"m1"}
    finally:
        again.close()
    third = SqliteIndexStore.open(index_path, base_id="b1", dims=DIMS)
    assert not third.was_reset and third.material_ids() == {"m1"}
    third.close()


def test_reader_per_thread(vstore: SqliteIndexStore) -> None:
    add(vstore, material("m1", "a.md", TEXT_A))
    seen: list[object] = []

    def work() -> None:
        seen.append(vstore._reader())
        assert vstore.keyword_search("alpha", 5)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in seen}) == 3


# The reference for the BM25 lane: one joined query sorted by (bm25, unit_id). The store ranks
# inside FTS5 first and joins only the winners; ties across the cut must not change the answer.
_REFERENCE_LANE = """SELECT su.unit_id, bm25(search_text_fts) AS r FROM search_text_fts
  JOIN search_text st ON st.fts_rowid = search_text_fts.rowid
  JOIN search_unit su ON su.unit_id = st.target_id
  WHERE search_text_fts MATCH ? ORDER BY r, su.unit_id LIMIT ?"""


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    docs=st.lists(
        st.lists(st.sampled_from(["owl", "fox", "elk", "yak"]), min_size=1, max_size=4),
        min_size=1,
        max_size=60,
    ),
    limit=st.integers(min_value=1, max_value=40),
)
def test_keyword_lane_equals_the_joined_query_with_ties(
    tmp_path_factory: pytest.TempPathFactory, docs: list[list[str]], limit: int
) -> None:
    store = SqliteIndexStore.open(tmp_path_factory.mktemp("k") / "i.sqlite", base_id="b", dims=None)
    try:
        for n, words in enumerate(docs):  # few words, short docs: equal scores everywhere
            text = " ".join(words)
            store.rebuild_material(
                MaterialInput(f"m{n:03d}", f"d{n:03d}.md", text, [Chunk(text, 0, len(text), 0)]),
                {},
            )
        # ordered by the absolute score (keyword_scale), equal scores by Concept ID; a unit
        # scores the same whatever the limit (no per-query normalisation)
        got = [(-h.score, h.relative_path) for h in store.keyword_search("owl fox", limit)]
        assert got == sorted(got)
        full = {h.unit_id: h.score for h in store.keyword_search("owl fox", 1000)}
        n_fts = len(list(store._writer.execute(_REFERENCE_LANE, ('"owl" OR "fox"', 1000))))
        assert len(full) == n_fts and len(got) == min(limit, n_fts)
        assert all(full[h.unit_id] == h.score for h in store.keyword_search("owl fox", limit))
    finally:
        store.close()
