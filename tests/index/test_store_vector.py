"""The in-memory vector lane: equals the exact SQL scan, drops zero norms, stays fresh."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from knowbase.errors import EmbeddingMismatch
from knowbase.index.base import MaterialInput
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.index.vector.matrix import VectorMatrix
from knowbase.units.chunk import Chunk
from knowbase.units.hashing import text_hash

DIMS = 3
_counter = itertools.count()


def put(store: SqliteIndexStore, mid: str, vectors: list[list[float]], tag: str = "w") -> None:
    """One material whose i-th chunk is the word ``<mid><tag><i>`` with the given vector.

    Vectors are content-addressed (same body → same stored vector), so a test that changes a
    chunk's vector changes its word via ``tag``.
    """
    words = [f"{mid}{tag}{i}" for i in range(len(vectors))]
    text = " ".join(words)
    chunks, pos = [], 0
    for i, w in enumerate(words):
        chunks.append(Chunk(w, pos, pos + len(w), i))
        pos += len(w) + 1
    emb = {
        text_hash(w): np.asarray(v, dtype=np.float32) for w, v in zip(words, vectors, strict=True)
    }
    store.rebuild_material(MaterialInput(mid, f"{mid}.md", text, chunks), emb)


@pytest.fixture
def store(tmp_path: Path):
    s = SqliteIndexStore.open(tmp_path / f"v{next(_counter)}.sqlite", base_id="b", dims=DIMS)
    yield s
    s.close()


def lane(hits) -> list[str]:
    return [h.unit_id for h in hits]


def test_zero_norm_vectors_are_left_out(store: SqliteIndexStore) -> None:
    put(store, "m", [[0, 0, 0], [1, 0, 0], [0, 1, 0]])
    hits = store.vector_search(np.array([1.0, 0.2, 0]), 10)
    assert [h.text for h in hits] == ["mw1", "mw2"]
    assert lane(hits) == lane(store.vector_search_sql(np.array([1.0, 0.2, 0]), 10))
    assert hits[0].score == pytest.approx(1 / np.sqrt(1.04), rel=1e-6)
    assert store.vector_matrix().size == 2 and len(store.vector_matrix().known) == 3
    assert store.vector_search(np.zeros(DIMS), 10) == []
    assert store.vector_search_sql(np.zeros(DIMS), 10) == []


def test_query_width_checked(store: SqliteIndexStore) -> None:
    put(store, "m", [[1, 0, 0]])
    with pytest.raises(EmbeddingMismatch):
        store.vector_search(np.ones(DIMS + 1), 5)


def test_ties_break_by_unit_id(store: SqliteIndexStore) -> None:
    put(store, "a", [[1, 0, 0], [1, 0, 0], [2, 0, 0]])
    put(store, "b", [[1, 0, 0], [0, 1, 0]])
    hits = store.vector_search(np.array([1.0, 0, 0]), 3)
    tied = sorted(h.unit_id for h in store.vector_search(np.array([1.0, 0, 0]), 10)[:4])
    assert lane(hits) == tied[:3]
    assert lane(hits) == lane(store.vector_search_sql(np.array([1.0, 0, 0]), 3))


def test_a_tiny_vector_keeps_its_direction(store: SqliteIndexStore) -> None:
    put(store, "m", [[1.2e-38, 0, 0], [0, 1, 0]])  # the first one's float32 square is 0
    hits = store.vector_search(np.array([1.0, 0, 0]), 1)
    assert [h.score for h in hits] == [pytest.approx(1.0)]


vec = st.lists(st.floats(-4, 4, width=32, allow_subnormal=False), min_size=DIMS, max_size=DIMS)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    base=st.lists(vec, min_size=1, max_size=12),
    dup_picks=st.lists(st.integers(0, 11), max_size=6),
    query=vec,
    k=st.integers(1, 20),
)
def test_vector_lane_equals_sql_scan(tmp_path: Path, base, dup_picks, query, k) -> None:
    # Duplicates (exact copies and power-of-two multiples) make exact ties on both sides.
    vectors = list(base) + [[2 * x for x in base[i % len(base)]] for i in dup_picks]
    vectors += [list(base[i % len(base)]) for i in dup_picks]
    q = np.asarray(query, dtype=np.float64)
    assume(np.linalg.norm(q) > 1e-3)
    # Rows that are exact power-of-two multiples of each other tie exactly on both sides (the
    # scaling is exact in float32); any other pair must differ by more than float32 rounding,
    # or the two exact computations may order it either way.
    dirs: dict[tuple[float, ...], float] = {}
    qn = q / np.linalg.norm(q)
    for v in vectors:
        a = np.asarray(v, dtype=np.float32)
        if not a.any():
            continue
        # sqlite-vec squares in float32: a row whose squared norm underflows (1e-38) gets an
        # infinite score there, so the SQL scan is no oracle for it (see the test below)
        assume(float(np.dot(a, a)) > 0)
        exp = np.frexp(np.abs(a).max())[1]
        key = tuple(np.ldexp(a, -exp).tolist())
        a64 = a.astype(np.float64)
        dirs[key] = float(a64 @ qn / np.linalg.norm(a64))
    cos = sorted(dirs.values())
    assume(all(b - a > 1e-4 for a, b in itertools.pairwise(cos)))
    path = tmp_path / f"h{next(_counter)}.sqlite"
    with SqliteIndexStore.open(path, base_id="h", dims=DIMS) as s:
        half = len(vectors) // 2
        put(s, "m1", vectors[:half])
        put(s, "m2", vectors[half:])
        mem = s.vector_search(q, k)
        sql = s.vector_search_sql(q, k)
        assert lane(mem) == lane(sql)
        for a, b in zip(mem, sql, strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-5)
        for within in (frozenset({"m1"}), frozenset({"m2"}), frozenset({"m1", "m2"})):
            # the row mask of a search scope cuts among the scope's rows, as SQL's WHERE does
            assert lane(s.vector_search(q, k, within=within)) == lane(
                s.vector_search_sql(q, k, within=within)
            )


def test_second_handle_sees_writes_via_version(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    writer = SqliteIndexStore.open(path, base_id="b", dims=DIMS)
    reader = SqliteIndexStore.open(path, base_id="b", dims=DIMS)
    try:
        put(writer, "m1", [[1, 0, 0]])
        q = np.array([0, 1.0, 0])
        assert [h.text for h in reader.vector_search(q, 1)] == ["m1w0"]
        v = reader.changes_version()
        put(writer, "m2", [[0, 1, 0], [0, 1, 1]])
        assert reader.changes_version() == v + 1
        assert [h.text for h in reader.vector_search(q, 2)] == ["m2w0", "m2w1"]
        writer.delete_materials(["m2"])
        assert [h.text for h in reader.vector_search(q, 2)] == ["m1w0"]
        put(writer, "m1", [[0, 0, 0], [0, 2, 0]], tag="x")  # rebuilt: the old unit is gone
        assert [h.text for h in reader.vector_search(q, 5)] == ["m1x1"]
        assert lane(reader.vector_search(q, 5)) == lane(reader.vector_search_sql(q, 5))
    finally:
        writer.close()
        reader.close()


def test_version_bumped_by_every_unit_change(store: SqliteIndexStore) -> None:
    v0 = store.changes_version()
    put(store, "m", [[1, 0, 0]])
    put(store, "m", [[1, 0, 0]])  # same units again: still a transaction that wrote units
    store.delete_materials(["m"])
    assert store.changes_version() == v0 + 3
    store.delete_materials(["m"])  # nothing to delete → no bump
    assert store.changes_version() == v0 + 3


def assert_same_vectors(got: VectorMatrix, want: VectorMatrix, rtol: float = 0) -> None:
    """Same live ids, same known ids, same vector per id (row order is not part of it)."""
    assert got.known == want.known and got.size == want.size
    a, b = got.vectors(), want.vectors()
    assert set(a) == set(b)
    for uid in a:
        np.testing.assert_allclose(a[uid], b[uid], rtol=rtol, atol=0)


def test_matrix_patch_equals_full_build() -> None:
    rng = np.random.default_rng(1)
    rows = [(f"u{i:03d}", rng.standard_normal(4).astype("<f4").tobytes()) for i in range(50)]
    rows.append(("u999", np.zeros(4, dtype="<f4").tobytes()))
    full = VectorMatrix.from_rows(rows[:40], dims=4, version=1)
    patched = full.patched(rows[40:], {"u001", "u017"}, version=2)
    want = VectorMatrix.from_rows(
        [r for r in rows if r[0] not in {"u001", "u017"}], dims=4, version=2
    )
    assert_same_vectors(patched, want)
    q = rng.standard_normal(4)
    assert patched.top_k(q, 7) == want.top_k(q, 7)
    assert VectorMatrix.from_rows([], dims=4, version=0).top_k(q, 3) == []


def test_store_patches_matrix_on_small_changes(store: SqliteIndexStore) -> None:
    rng = np.random.default_rng(7)
    for i in range(4):
        put(store, f"p{i}", rng.standard_normal((5, DIMS)).tolist())
    first = store.vector_matrix()
    put(store, "p9", rng.standard_normal((2, DIMS)).tolist())  # 2 added of 20: patched
    store.delete_materials(["p0"])  # 5 removed: patched again
    patched = store.vector_matrix()
    assert patched is not first and patched.version == store.changes_version()
    rows = store._writer.execute(
        "SELECT su.unit_id, e.vector_blob FROM search_unit su JOIN search_text st"
        " ON st.target_id = su.unit_id JOIN embedding e USING (embedding_text_hash)"
    ).fetchall()
    full = VectorMatrix.from_rows(rows, dims=DIMS, version=patched.version)
    assert_same_vectors(patched, full, rtol=1e-6)
    q = rng.standard_normal(DIMS)
    assert lane(store.vector_search(q, 8)) == lane(store.vector_search_sql(q, 8))


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.lists(st.integers(0, 60), max_size=12),  # ids added (or re-added)
            st.lists(st.integers(0, 60), max_size=8),  # ids removed
        ),
        min_size=1,
        max_size=8,
    ),
    compact_at=st.sampled_from([2, 1024]),
)
def test_patches_in_any_order_equal_a_full_build(steps, compact_at) -> None:  # type: ignore[no-untyped-def]
    import knowbase.index.vector.matrix as vm

    old_min = vm.COMPACT_MIN_DEAD
    vm.COMPACT_MIN_DEAD = compact_at
    try:
        rng = np.random.default_rng(3)
        vec = {i: rng.standard_normal(4).astype("<f4") for i in range(61)}
        vec[0] = np.zeros(4, dtype="<f4")  # a zero-norm unit: known, never a row

        def row(i: int) -> tuple[str, bytes]:
            return (f"u{i:02d}", vec[i].tobytes())

        present = {1, 2, 3}
        matrix = VectorMatrix.from_rows([row(i) for i in present], dims=4, version=0)
        q = rng.standard_normal(4)
        history = []
        for version, (add, remove) in enumerate(steps, start=1):
            history.append((matrix, matrix.top_k(q, 5)))
            removed = {f"u{i:02d}" for i in remove if i in present} - {f"u{i:02d}" for i in add}
            present = (present - set(remove)) | set(add)
            matrix = matrix.patched([row(i) for i in set(add)], removed, version=version)
            want = VectorMatrix.from_rows([row(i) for i in present], dims=4, version=version)
            assert_same_vectors(matrix, want)
            assert matrix.top_k(q, 5) == want.top_k(q, 5)
            assert matrix.top_k(q, 100) == want.top_k(q, 100)
        for old, answer in history:  # a patch never changes what an older version shows
            assert old.top_k(q, 5) == answer
    finally:
        vm.COMPACT_MIN_DEAD = old_min


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    removed=st.sets(st.integers(0, 39), max_size=20),
    allowed=st.sets(st.integers(0, 49), max_size=50),
    k=st.integers(1, 15),
    seed=st.integers(0, 2**16),
)
def test_masked_top_k_equals_top_k_of_the_allowed_rows(n, removed, allowed, k, seed) -> None:  # type: ignore[no-untyped-def]
    """A mask over a patched matrix (dead rows, appended rows) ranks exactly the allowed live
    rows: the same answer as a matrix built from those rows alone."""
    rng = np.random.default_rng(seed)
    rows = [(f"u{i:02d}", rng.standard_normal(4).astype("<f4").tobytes()) for i in range(n + 10)]
    gone = {f"u{i:02d}" for i in removed if i < n}
    matrix = VectorMatrix.from_rows(rows[:n], dims=4, version=1).patched(rows[n:], gone, version=2)
    wanted = {f"u{i:02d}" for i in allowed}
    mask = np.zeros(len(matrix.ids), dtype=bool)
    mask[[matrix.rows[u] for u in wanted if u in matrix.rows]] = True
    alone = VectorMatrix.from_rows(
        [r for r in rows if r[0] in wanted and r[0] not in gone], dims=4, version=2
    )
    q = rng.standard_normal(4)
    got, want = matrix.top_k(q, k, mask=mask), alone.top_k(q, k)
    # (two matrix products may round the last bit differently; random rows never tie that close)
    assert [u for u, _ in got] == [u for u, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)
    assert matrix.top_k(q, k, mask=np.ones(len(matrix.ids), dtype=bool)) == matrix.top_k(q, k)
    with pytest.raises(ValueError):
        matrix.top_k(q, k, mask=np.ones(len(matrix.ids) + 1, dtype=bool))


def test_a_lanes_owners_are_read_once_per_matrix(
    store: SqliteIndexStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The material of each hit comes from SQL the first time a matrix meets the unit, then
    from memory; a new version (a material replaced) reads again, and a re-added unit's new
    material is what the lane reports."""
    from knowbase.index.sqlite import vectors as sqlite_vectors

    reads: list[int] = []
    real = sqlite_vectors.owners

    def counted(conn, ids):  # type: ignore[no-untyped-def]
        reads.append(len(ids))
        return real(conn, ids)

    monkeypatch.setattr(sqlite_vectors, "owners", counted)
    put(store, "a", [[1, 0, 0], [0, 1, 0]])
    q = np.array([1.0, 0.5, 0])
    first = store.vector_lane(q, 10)
    assert [(h.unit_id, h.material_id) for h in first] == [(h.unit_id, "a") for h in first] and len(
        first
    ) == 2
    assert store.vector_lane(q, 10) == first
    assert reads == [2]  # the second search asked SQL nothing
    store.delete_materials(["a"])
    put(store, "b", [[1, 0, 0]], tag="x")
    again = store.vector_lane(q, 10)
    assert [h.material_id for h in again] == ["b"] and len(reads) == 2


def test_the_owners_memory_is_bounded(
    store: SqliteIndexStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from knowbase.index.sqlite import vectors as sqlite_vectors

    monkeypatch.setattr(sqlite_vectors, "OWNERS_MAX", 2)
    put(store, "a", [[1, 0, 0], [0, 1, 0], [0, 0, 1]])
    q = np.array([1.0, 0.5, 0.2])
    hits = store.vector_lane(q, 10)
    assert {h.material_id for h in hits} == {"a"} and len(hits) == 3
    assert len(sqlite_vectors._OWNERS[store.vector_matrix()]) <= 2
    assert store.vector_lane(q, 10) == hits
