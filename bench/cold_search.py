"""Cold ``kb search``: a fresh CLI process on a hybrid MiniLM base against one on a BM25-only base.

    .venv/bin/python bench/cold_search.py                        # this checkout only
    .venv/bin/python bench/cold_search.py --before ../main/src   # old code vs this, one run

Builds one home with two bases of the same ``--notes`` notes (docstring paragraphs of the
standard library): ``hybrid`` on ``local:all-minilm-l6-v2`` (its vectors come from the hash
provider widened to 384 dims, so the build takes seconds: a cold search's cost does not depend
on what the vectors mean) and ``bm25`` without a model. The model's ONNX export is made first,
as the first import of a real MiniLM base makes it. Then, round-robin with one unmeasured
warm-up each, ``--runs`` times: ``python -m knowbase.interfaces.cli search --json`` on each base,
for each code tree (``--before SRC`` puts another checkout's ``src`` on PYTHONPATH; "after" is
this checkout). Each run is one whole process: wall time from start to exit, peak RSS from the
kernel's accounting of the finished process (``os.wait4``, as ``/usr/bin/time -v`` reports it;
the build runs in a child so this process stays small: a forked child's peak starts at its
parent's, and the kernel keeps it across exec).

Prints per code tree and base the median wall (and CPU) and the largest peak RSS, the
hybrid/BM25 ratio (target <= 2x, wall <= 1.5 s, RSS <= 300 MiB), and after/before. The machine
is shared: quote the ratios, measured in the same run.

Measured 2026-12-06 (issue 30), ``--notes 1000 --runs 5 --before`` the pre-ONNX tree, on a
2-core machine shared with five other sessions (load ~9; a quiet BM25-only search takes 0.84 s):

                 hybrid           bm25            hybrid/bm25
    before   15.56 s 549 MiB   2.39 s  85 MiB       6.51x
    after     2.97 s 182 MiB   2.66 s  86 MiB       1.11x      after/before (hybrid) 0.19x

Then (2026-12-06 19:53, load ~2-3 while a CI run shared the machine; ``--runs 7 --before`` the
tree before this change) a catalog at head stopped loading Alembic at every open:

                 hybrid           bm25            hybrid/bm25
    before    1.50 s 187 MiB   1.06 s  87 MiB       1.41x
    after     1.22 s 175 MiB   0.89 s  75 MiB       1.37x      after/before 0.81x / 0.84x

Then (2026-12-07 22:31, issue 39 item 5, ``--runs 7 --before`` main at c12f220; load 4-5, so
every wall is inflated and CPU, user + system of the whole process, is the closer figure to a
quiet machine's wall) a search imports no operation, a BM25-only one no numpy, and a process
that runs a local model starts numpy's BLAS with one thread:

                 hybrid wall (CPU)        bm25 wall (CPU)        hybrid/bm25
    before    1.06 s (0.73) 171 MiB   0.75 s (0.58) 73 MiB       1.41x
    after     0.98 s (0.69) 171 MiB   0.73 s (0.47) 60 MiB       1.34x   after/before 0.92x / 0.97x

At load ~3 the same evening (the two trees alternated, 9-11 runs): BM25-only 0.48 -> 0.42 s wall
(0.56 -> 0.41 s CPU), hybrid 0.97 -> 0.78 s (0.71 -> 0.66 s CPU). Targets: <= 0.5 s BM25-only,
<= 0.7 s hybrid on a quiet machine; where the rest goes: docs/eval.md, "A cold kb search".

This machine's shell sets ``PYTHONDONTWRITEBYTECODE=1``: knowbase's own modules are then
compiled from source by every process (~0.25 s, 165 modules). Unset it for this bench, as an
installed package has its bytecode.

A whole-process timer on the same kind of home agreed: hybrid/BM25 wall 1.10x, CPU 1.10x
(1.19 s vs 1.06 s of CPU), peak 179 MiB; after/before wall 0.157x, CPU 0.165x, 178 vs 544 MiB.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

QUERIES = [
    "how to open a file for reading",
    "parse command line arguments",
    "convert a date to a string",
    "thread safe queue of tasks",
    "compress data with a stream",
]
MODEL = "local:all-minilm-l6-v2"


def build(home: Path, notes: int) -> None:
    """The two bases, same notes; the hybrid one's vectors from the hash provider."""
    import numpy as np

    sys.path.insert(0, str(Path(__file__).parent))
    from search_scale import paragraphs

    from knowbase.operations.add.inputs import AddInput
    from knowbase.providers.hashing_provider import hash_vector
    from knowbase.providers.registry import get_embedding_provider
    from knowbase.service import Knowledge
    from knowbase.settings import Settings

    with Knowledge(Settings(home=home)) as kb:
        hybrid = kb.create_base("hybrid", embedding_model_id=MODEL, file_processor_id=None)
        bm25 = kb.create_base("bm25", file_processor_id=None)
        provider = get_embedding_provider(MODEL, kb.settings)
        provider.load()  # the ONNX export a real import would have made (no-op on old code)
        provider.embed = lambda texts: np.stack([hash_vector(t, 384) for t in texts])
        inputs = [AddInput.note(text) for text in paragraphs(notes)]
        for base in (hybrid, bm25):
            for i in range(0, len(inputs), 1000):
                kb.add(base.id, inputs[i : i + 1000], wait=True, timeout_s=3600)


def one_run(src: Path | None, home: Path, base: str, query: str) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MiB, mode) of one cold ``kb search`` process."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    cmd = [sys.executable, "-m", "knowbase.interfaces.cli", "search", "--home", str(home)]
    cmd += [base, query, "--json"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # this process's own peak, not the children's
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"kb search failed ({proc.returncode}): {err.read()[-2000:]!r}")
        cpu = usage.ru_utime + usage.ru_stime  # every thread's, numpy's BLAS pool included
        return wall, cpu, usage.ru_maxrss / 1024, json.loads(out.read())["mode"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", type=Path, default=None, help="src/ of the code to compare")
    parser.add_argument("--build-only", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build_only:
        build(args.build_only, args.notes)
        return
    after = Path(__file__).resolve().parent.parent / "src"
    trees = ([("before", args.before.resolve())] if args.before else []) + [("after", after)]

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        t0 = time.monotonic()
        # In a child: a fork of a big parent would start each measured process at the
        # parent's RSS (the kernel's peak survives exec), so this process stays small.
        cmd = [sys.executable, __file__, "--notes", str(args.notes), "--build-only", str(home)]
        subprocess.run(cmd, check=True)
        print(f"built two bases of {args.notes} notes in {time.monotonic() - t0:.0f} s")
        walls: dict[tuple[str, str], list[float]] = {}
        cpus: dict[tuple[str, str], list[float]] = {}
        rss: dict[tuple[str, str], float] = {}
        for run in range(args.runs + 1):  # run 0 warms the page cache, unmeasured
            for label, src in trees:
                for base in ("hybrid", "bm25"):
                    query = QUERIES[run % len(QUERIES)]
                    wall, cpu, peak, mode = one_run(src, home, base, query)
                    assert mode == ("hybrid" if base == "hybrid" else "bm25"), (base, mode)
                    if run:
                        walls.setdefault((label, base), []).append(wall)
                        cpus.setdefault((label, base), []).append(cpu)
                        rss[(label, base)] = max(rss.get((label, base), 0.0), peak)
    print(f"cold kb search, median of {args.runs} runs: wall s (CPU s), peak RSS MiB")
    print(f"  load average {os.getloadavg()[0]:.1f} at the end")
    medians = {key: statistics.median(values) for key, values in walls.items()}
    cpu = {key: statistics.median(values) for key, values in cpus.items()}
    for label, _ in trees:
        h, b = medians[(label, "hybrid")], medians[(label, "bm25")]
        print(
            f"  {label:7s} hybrid {h:5.2f} s ({cpu[(label, 'hybrid')]:4.2f}) "
            f"{rss[(label, 'hybrid')]:4.0f} MiB   bm25 {b:5.2f} s ({cpu[(label, 'bm25')]:4.2f}) "
            f"{rss[(label, 'bm25')]:4.0f} MiB   hybrid/bm25 {h / b:4.2f}x"
        )
    if args.before:
        ratio = {b: medians[("after", b)] / medians[("before", b)] for b in ("hybrid", "bm25")}
        print(f"  after/before: hybrid {ratio['hybrid']:.2f}x, bm25 {ratio['bm25']:.2f}x")


if __name__ == "__main__":
    main()
