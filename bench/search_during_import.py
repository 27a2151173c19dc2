"""Hybrid searches on a big base while another process imports into it (issue 13, item 4).

    .venv/bin/python bench/search_during_import.py --chunks 100000 --import-files 400

Builds a hybrid base of about ``--chunks`` chunks (``hash:d384`` vectors: the search path does
not depend on what the vectors mean, and no model's encode sits in the figure), then times
``Knowledge.search`` — keyword and vector lanes, fusion, visibility — in this process, first
idle and then while a ``kb add`` *process* imports ``--import-files`` notes into the same base.
Each file the other process completes moves the base's ``vectors_version``; this process's
in-memory matrix follows by patching (cost follows the rows added), never by a full reload of
the base. Prints p50/p99 idle and during the import, their ratios, how many matrix versions the
searches saw, and the share of searches that met a new version.

Measured 2026-12-04 with the defaults (86,257 chunks; the machine loaded by a CI run, so the
absolute figures are high): idle p50 197 ms / p99 572 ms, during a 400-file import p50 345 ms /
p99 1,673 ms (1.75x / 2.92x); 103 of 160 searches met a new matrix version, followed by 197
patches (p50 26 ms, max 510 ms when the buffer grew) and no full load. What a patch still pays
per version in proportion to the base: ``SELECT unit_id FROM search_unit`` and the copies of
the matrix's id set and row map.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from ingest import WORDS, paragraph  # noqa: E402

MODEL = "hash:d384"


def pct(values: list[float], p: float) -> float:
    return sorted(values)[min(len(values) - 1, int(p * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--per-item", type=int, default=50, help="paragraphs (chunks) per note")
    parser.add_argument("--import-files", type=int, default=400)
    parser.add_argument("--idle-queries", type=int, default=200)
    args = parser.parse_args()

    from knowbase.index.vector.matrix import VectorMatrix
    from knowbase.operations.add.inputs import AddInput
    from knowbase.service import Knowledge
    from knowbase.settings import Settings

    # Count how the searching process's matrix follows the other process: full loads
    # (from_rows) against patches, and the time each takes.
    calls: dict[str, list[float]] = {"from_rows": [], "patched": []}
    for name in calls:
        raw = VectorMatrix.__dict__[name]
        plain = raw.__func__ if isinstance(raw, classmethod) else raw

        def counted(*a, _plain=plain, _name=name, **k):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            try:
                return _plain(*a, **k)
            finally:
                calls[_name].append((time.perf_counter() - t) * 1000)

        setattr(VectorMatrix, name, classmethod(counted) if name == "from_rows" else counted)

    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        kb = Knowledge(Settings(home=home, test_providers=True))
        try:
            base = kb.create_base(
                "big", embedding_model_id=MODEL, file_processor_id=None, chunk_size=100,
                chunk_overlap=0,
            )  # fmt: skip
            t0 = time.perf_counter()
            notes = [
                AddInput.note("\n\n".join(paragraph(rng) for _ in range(args.per_item)))
                for _ in range(max(1, args.chunks // args.per_item))
            ]
            for i in range(0, len(notes), 500):
                kb.add(base.id, notes[i : i + 500], wait=True, timeout_s=7200)
            with kb.rt.lease(kb.get_base(base.id)) as store:
                chunks = store.vector_matrix().size
            print(f"base             {chunks} chunks, built in {time.perf_counter() - t0:.0f} s")
            queries = [
                f"how does the {rng.choice(WORDS)} change the {rng.choice(WORDS)}"
                for _ in range(50)
            ]

            def timed(q: str) -> tuple[float, int]:
                t = time.perf_counter()
                response = kb.search(base.id, q)
                ms = (time.perf_counter() - t) * 1000
                assert response.mode == "hybrid", response.explain
                with kb.rt.lease(kb.get_base(base.id)) as store:
                    version = store.vector_matrix().version
                return ms, version

            for q in queries[:10]:
                timed(q)
            idle = [timed(queries[i % len(queries)])[0] for i in range(args.idle_queries)]

            folder = Path(tmp) / "import"
            folder.mkdir()
            for i in range(args.import_files):
                (folder / f"n{i:05d}.md").write_text(paragraph(rng) + "\n\n" + paragraph(rng))
            for v in calls.values():
                v.clear()
            env = {**os.environ, "KNOWBASE_HOME": str(home), "KNOWBASE_TEST_PROVIDERS": "1"}
            log = Path(tmp) / "import.log"
            proc = subprocess.Popen(
                [sys.executable, "-m", "knowbase.interfaces.cli", "add", "big", str(folder)],
                env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"),
            )  # fmt: skip
            during: list[float] = []
            versions: list[int] = []
            i = 0
            t_import = time.perf_counter()
            while proc.poll() is None:
                ms, version = timed(queries[i % len(queries)])
                during.append(ms)
                versions.append(version)
                i += 1
            import_s = time.perf_counter() - t_import
            if proc.returncode != 0:
                raise SystemExit(log.read_text()[-2000:])
            with kb.rt.lease(kb.get_base(base.id)) as store:
                after = store.vector_matrix().size
        finally:
            kb.close()
    moved = sum(1 for a, b in zip(versions, versions[1:], strict=False) if a != b)
    i50, i99 = statistics.median(idle), pct(idle, 0.99)
    d50, d99 = statistics.median(during), pct(during, 0.99)
    print(f"import           {args.import_files} files in {import_s:.1f} s (other process)")
    print(f"                 the base grew to {after} chunks")
    print(f"idle             p50 {i50:.1f} ms  p99 {i99:.1f} ms  ({len(idle)} searches)")
    print(f"during import    p50 {d50:.1f} ms  p99 {d99:.1f} ms  ({len(during)} searches)")
    print(f"ratio            p50 {d50 / i50:.2f}x  p99 {d99 / i99:.2f}x")
    print(
        f"matrix versions  {len(set(versions))} seen; {moved} of {len(during)} searches"
        " met a new one"
    )
    loads, patches = calls["from_rows"], calls["patched"]
    print(
        f"matrix follows   {len(patches)} patches (p50 {statistics.median(patches or [0]):.2f} ms,"
        f" max {max(patches or [0]):.2f} ms), {len(loads)} full loads during the import"
    )


if __name__ == "__main__":
    main()
