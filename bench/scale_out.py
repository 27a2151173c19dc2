"""Scale-out figures on the embedded PostgreSQL 18 (pgvector built by ``.ci/pgvector.sh``).

``--ann`` (default): pgvector HNSW vs the exact scan through the postgres index backend's
tables: recall@10 and latency per ``hnsw.ef_search`` — the measurement behind
``postgres.EF_SEARCH_MIN``.

``--ingest``: one folder indexed by 1, 2 and 4 worker *processes* (``tests/postgres/
pg_worker.py``, one job thread each) on one PostgreSQL catalog + index, the embedding a fixed
per-batch latency (``hash:d384?delay=…``, so the figure measures our pipeline and the queue,
not this CPU). Prints docs/s and the ratio to one worker.

Runs the embedded PostgreSQL 18 of the tests (with pgvector built by ``.ci/pgvector.sh``).
Vectors are synthetic, clustered in a low-dimensional subspace (:func:`_vectors`): i.i.d. noise
vectors have no neighbourhoods and make any ANN index look broken (DESIGN "Big-base vector
lane"); real-text embeddings would be better still, and no model runs fast enough on this
machine to embed 100k texts. Recall is against the exact ``ORDER BY <=>`` scan of the same rows.

    python bench/scale_out.py --rows 20000 --dims 384 --queries 100
    python bench/scale_out.py --ingest --docs 80 --delay 0.2

Prints one line per ef_search: recall@10, median and p95 latency, and the ratio to exact.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]


def _vectors(rng: np.random.Generator, n: int, args: argparse.Namespace) -> np.ndarray:
    """Cluster centres in a random ``--intrinsic``-dimensional subspace of the ``--dims``
    space, points spread around them, plus a little full-rank noise: text embeddings are
    low-rank like this; i.i.d. noise in 384 dims is not."""
    basis = np.random.default_rng(0).normal(size=(args.intrinsic, args.dims))
    centres = np.random.default_rng(1).normal(size=(args.clusters, args.intrinsic))
    labels = rng.integers(0, args.clusters, size=n)
    latent = centres[labels] + args.spread * rng.normal(size=(n, args.intrinsic))
    noise = 0.05 * rng.normal(size=(n, args.dims))
    return (latent @ basis + noise).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--clusters", type=int, default=200)
    ap.add_argument("--spread", type=float, default=0.5)
    ap.add_argument("--intrinsic", type=int, default=32)
    ap.add_argument("--ef", default="10,20,40,64,100,200,400")
    ap.add_argument("--ingest", action="store_true", help="worker scaling instead of ANN")
    ap.add_argument("--docs", type=int, default=80)
    ap.add_argument("--delay", type=float, default=0.2, help="seconds per embedding batch")
    ap.add_argument("--workers", default="1,2,4")
    args = ap.parse_args()
    if args.ingest:
        ingest(args)
        return

    from knowbase.catalog import bases as base_repo
    from knowbase.catalog.db import Catalog
    from knowbase.pipeline.store.postgres import PostgresIndexStore
    from knowbase.pipeline.store.postgres_sql import vector_literal
    from pg_server import TEMPLATE_DB, running_server

    rng = np.random.default_rng(1)
    data = _vectors(rng, args.rows, args)
    queries = _vectors(rng, args.queries, args)
    with running_server() as server:
        if not server.has_vector:
            sys.exit("pgvector is not built: run .ci/pgvector.sh")
        catalog = Catalog(server.url(server.new_database(TEMPLATE_DB)))
        with catalog.write_tx() as conn:
            base = base_repo.insert(
                conn, name="bench", embedding_model_id="x", dimensions=args.dims
            )
        store = PostgresIndexStore.open(catalog.engine, base_id=base.id, dims=args.dims)
        table = store.vec_table
        raw = catalog.engine.raw_connection()
        started = time.perf_counter()
        with raw.cursor() as cur:
            cur.execute(f"DROP INDEX IF EXISTS {table}_hnsw")
            with cur.copy(
                f"COPY {table} (base_id, embedding_text_hash, embedding) FROM STDIN"
            ) as cp:
                for i, vec in enumerate(data):
                    cp.write_row((base.id, f"h{i}", vector_literal(vec)))
            raw.commit()
            loaded = time.perf_counter() - started
            started = time.perf_counter()
            cur.execute("SET maintenance_work_mem = '1GB'")
            cur.execute(
                f"CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops)"
            )
            raw.commit()
            built = time.perf_counter() - started
            print(f"{args.rows} x {args.dims}: load {loaded:.1f} s, HNSW build {built:.1f} s")
            sql = (
                f"SELECT embedding_text_hash FROM {table} WHERE base_id = %s"
                " ORDER BY embedding <=> %s::vector LIMIT 10"
            )

            def run(settings: list[str]) -> tuple[list[set[str]], list[float]]:
                found, times = [], []
                for q in queries:
                    lit = vector_literal(q)
                    t0 = time.perf_counter()
                    for s in settings:
                        cur.execute(s)
                    cur.execute(sql, (base.id, lit))
                    found.append({r[0] for r in cur.fetchall()})
                    times.append(time.perf_counter() - t0)
                    raw.rollback()
                return found, times

            cur.execute("ANALYZE " + table)
            raw.commit()
            for label, setting in (("exact", "SET LOCAL enable_indexscan = off"), ("hnsw", "")):
                cur.execute("BEGIN")
                if setting:
                    cur.execute(setting)
                cur.execute("EXPLAIN " + sql, (base.id, vector_literal(queries[0])))
                plan = " / ".join(r[0].strip()[:60] for r in cur.fetchall()[:2])
                print(f"{label} plan: {plan}")
                raw.rollback()
            exact, exact_t = run(["BEGIN", "SET LOCAL enable_indexscan = off"])
            exact_ms = statistics.median(exact_t) * 1000
            print(f"exact scan: median {exact_ms:.1f} ms")
            for ef in (int(x) for x in args.ef.split(",")):
                got, t = run(
                    [
                        "BEGIN",
                        f"SET LOCAL hnsw.ef_search = {ef}",
                        "SET LOCAL hnsw.iterative_scan = strict_order",
                    ]
                )
                recall = np.mean([len(a & b) / 10 for a, b in zip(got, exact, strict=True)])
                med = statistics.median(t) * 1000
                p95 = sorted(t)[int(0.95 * len(t)) - 1] * 1000
                print(
                    f"ef_search={ef:4d}: recall@10 {recall:.3f}, median {med:.1f} ms,"
                    f" p95 {p95:.1f} ms, exact/hnsw {exact_ms / med:.1f}x"
                )
        raw.close()
        catalog.dispose()


def ingest(args: argparse.Namespace) -> None:
    import os
    import subprocess
    import tempfile

    from knowbase.catalog.schema import TERMINAL_ITEM_STATUSES
    from knowbase.ingestion.inputs import AddInput
    from knowbase.service import Knowledge
    from knowbase.settings import Settings
    from pg_server import TEMPLATE_DB, running_server

    worker = ROOT / "tests" / "postgres" / "pg_worker.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNOWBASE_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    rates: dict[int, float] = {}
    with running_server() as server, tempfile.TemporaryDirectory() as tmp:
        if not server.has_vector:
            sys.exit("pgvector is not built: run .ci/pgvector.sh")
        folder = Path(tmp) / "corpus"
        folder.mkdir()
        for i in range(args.docs):
            (folder / f"doc{i:04d}.md").write_text(
                f"# Doc {i}\n\nDocument {i} is about topic {i % 13} and capybaras.\n"
            )
        for n in (int(x) for x in args.workers.split(",")):
            url = server.url(server.new_database(TEMPLATE_DB))
            home = Path(tmp) / f"home{n}"
            kb = Knowledge(Settings(home=home, database_url=url))
            model = f"hash:d384?delay={args.delay}"
            base = kb.create_base("b", embedding_model_id=model, file_processor_id=None)
            procs = []
            for _ in range(n):
                p = subprocess.Popen(
                    [sys.executable, str(worker), str(home), url, "1"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    env=env,
                )
                assert p.stdout is not None and p.stdout.readline().strip() == "ready"
                procs.append(p)
            started = time.perf_counter()
            kb.add(base.id, [AddInput.directory(folder)])
            while True:
                leaves = [i for i in kb.list_items(base.id) if not i.is_container]
                done = [i for i in leaves if i.status in TERMINAL_ITEM_STATUSES]
                if len(leaves) == args.docs and len(done) == args.docs:
                    break
                time.sleep(0.05)
            took = time.perf_counter() - started
            ok = sum(i.status == "completed" for i in leaves)
            rates[n] = args.docs / took
            ratio = rates[n] / rates[min(rates)]
            print(f"{n} worker(s): {args.docs} docs ({ok} completed) in {took:.1f} s,"
                  f" {rates[n]:.1f} docs/s, {ratio:.2f}x one worker")  # fmt: skip
            for p in procs:
                p.kill()
                p.wait(10)
            kb.close()


if __name__ == "__main__":
    main()
