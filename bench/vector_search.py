"""Benchmark: the in-memory vector lane against an exact ``vec_distance_cosine`` scan in SQL.

Builds a real index (``SqliteIndexStore.rebuild_material``) of random 1536-dim float32 vectors,
then for 20k and 50k units times, per query:

(a) the project's vector lane, ``store.vector_search`` with the matrix already loaded (includes
    the ``vectors_version`` check and fetching the 10 hits' rows), and the bare
    ``VectorMatrix.top_k`` inside it;
(b) ``store.vector_search_sql``: a full ``vec_distance_cosine`` scan in SQLite, same rows,
    same tie-break;

asserts identical top-10 ids, and prints ms per query and the ratio. The matrix build (full
load from SQLite), the patch from 20k to 50k, and patches of one material (500 rows) added to
and removed from the 50k base are reported separately.

Run with numpy's BLAS at full speed (DESIGN: those two variables halve it on this machine):

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/vector_search.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from knowbase.index.base import MaterialInput
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.index.vector.matrix import CACHE
from knowbase.units.chunk import Chunk
from knowbase.units.hashing import text_hash

DIMS = 1536
PER_MATERIAL = 500
QUERIES = 7
TOP_K = 10
SIZES = (20_000, 50_000)


def add_units(store: SqliteIndexStore, start: int, stop: int, rng: np.random.Generator) -> None:
    """Materials of PER_MATERIAL chunks; chunk i's body is the unique word ``u<i>``."""
    for first in range(start, stop, PER_MATERIAL):
        ids = range(first, min(first + PER_MATERIAL, stop))
        words = [f"u{i:06d}" for i in ids]
        text = " ".join(words)
        chunks = [Chunk(w, n * 8, n * 8 + 7, n) for n, w in enumerate(words)]
        vectors = rng.standard_normal((len(words), DIMS), dtype=np.float32)
        emb = {text_hash(w): v for w, v in zip(words, vectors, strict=True)}
        store.rebuild_material(MaterialInput(f"m{first}", f"m{first}.md", text, chunks), emb)


def ms(fn) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def bench(store: SqliteIndexStore, n: int, rng: np.random.Generator) -> float:
    queries = rng.standard_normal((QUERIES, DIMS), dtype=np.float32)
    matrix = store.vector_matrix()
    assert len(matrix.ids) == n, (len(matrix.ids), n)
    store.vector_search(queries[0], TOP_K)  # warm BLAS threads and the reader connection
    store.vector_search_sql(queries[0], TOP_K)
    lane, bare, sql = [], [], []
    for q in queries:
        t_lane, hits = ms(lambda q=q: store.vector_search(q, TOP_K))
        t_bare, _ = ms(lambda q=q: matrix.top_k(q, TOP_K))
        t_sql, ref = ms(lambda q=q: store.vector_search_sql(q, TOP_K))
        ids, ref_ids = [h.unit_id for h in hits], [h.unit_id for h in ref]
        assert ids == ref_ids, f"top-{TOP_K} differs at n={n}"
        lane.append(t_lane)
        bare.append(t_bare)
        sql.append(t_sql)
        print(
            f"  n={n:>6}  lane {t_lane:7.2f} ms  (top_k {t_bare:6.2f} ms)"
            f"  sql scan {t_sql:8.2f} ms  same top-{TOP_K}: yes"
        )
    med_lane, med_sql = statistics.median(lane), statistics.median(sql)
    ratio = med_sql / med_lane
    print(
        f"n={n}: median lane {med_lane:.2f} ms (bare top_k {statistics.median(bare):.2f} ms),"
        f" median SQL scan {med_sql:.2f} ms, ratio {ratio:.1f}x"
    )
    return ratio


def main() -> int:
    rng = np.random.default_rng(20240601)
    ratios = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteIndexStore.open(Path(tmp) / "index.sqlite", base_id="bench", dims=DIMS)
        try:
            done = 0
            for n in SIZES:
                t, _ = ms(lambda n=n, done=done: add_units(store, done, n, rng))
                print(f"indexed units {done}..{n} in {t / 1000:.1f} s")
                if done == 0:
                    t, _ = ms(store.vector_matrix)
                    print(f"matrix build (full load of {n} rows from SQLite): {t:.0f} ms")
                else:
                    t, _ = ms(store.vector_matrix)
                    print(f"matrix patch ({done} → {n} rows, version moved): {t:.0f} ms")
                    CACHE.discard(store._cache_key)
                    t, _ = ms(store.vector_matrix)
                    print(f"matrix build (full load of {n} rows from SQLite): {t:.0f} ms")
                done = n
                ratios[n] = bench(store, n, rng)
            # A small change on the big base: the patch follows the change, not the base.
            add_units(store, done, done + PER_MATERIAL, rng)
            t, _ = ms(store.vector_matrix)
            print(
                f"matrix patch ({done} → {done + PER_MATERIAL} rows, one material added):"
                f" {t:.0f} ms"
            )
            store.delete_materials([f"m{done}"])
            t, m = ms(store.vector_matrix)
            print(
                f"matrix patch ({done + PER_MATERIAL} → {m.size} rows, one material removed):"
                f" {t:.0f} ms"
            )
        finally:
            store.close()
    target = ratios[SIZES[-1]]
    print(f"target ≥10x at {SIZES[-1]}: {'met' if target >= 10 else 'NOT met'} ({target:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
