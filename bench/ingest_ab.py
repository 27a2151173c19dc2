"""Before vs after in one run: ``bench/ingest.py`` on two source trees, alternating.

    .venv/bin/python bench/ingest_ab.py --before OLD/src --rounds 3 -- --bm25-only --docs 2000
    .venv/bin/python bench/ingest_ab.py --before OLD/src -- --remote-latency 0.2

Each round runs ``bench/ingest.py ARGS`` once with ``PYTHONPATH=<before>`` and once with this
checkout's ``src`` (the order flips every round, so a load drift hits both alike), and reads
its figures: the ``kb add`` wall time, docs/s, the CPU the add took in that process, texts per
embed call and the ratio to the model's ceiling where there is a model. It prints every run,
the medians, and after/before. On a shared machine the CPU per document is the steadier
figure: the wall clock follows the load.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
AFTER = HERE.parent / "src"
FIGURES = {
    "wall_s": r"^kb add\s+([\d.]+) s",
    "docs_s": r"([\d.]+) docs/s",
    "docs_s_indexing": r"after the expansion: ([\d.]+) docs/s",
    "expand_s": r"^expand \+ copy\s+([\d.]+) s",
    "cpu_ms_doc": r"^cpu over the add\s+[\d.]+ s\s+([\d.]+) ms/doc",
    "texts_call": r"([\d.]+) texts per call",
    "ratio": r"^ratio\s+([\d.]+) of the ceiling",
}


def run_once(src: Path, args: list[str]) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(HERE)]))
    out = subprocess.run(
        [sys.executable, str(HERE / "ingest.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"bench/ingest.py failed on {src}:\n{out.stderr[-3000:]}")
    found: dict[str, float] = {}
    for name, pattern in FIGURES.items():
        m = re.search(pattern, out.stdout, re.M)
        if m:
            found[name] = float(m.group(1))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the old tree's src/")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then bench/ingest.py's args")
    ns = parser.parse_args()
    args = [a for a in ns.args if a != "--"]
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for r in range(ns.rounds):
        order = [("before", ns.before), ("after", AFTER)]
        for label, src in order if r % 2 == 0 else order[::-1]:
            figures = run_once(src, args)
            runs[label].append(figures)
            print(f"round {r + 1} {label:6} " + "  ".join(f"{k} {v:g}" for k, v in figures.items()))
            sys.stdout.flush()
    print(f"bench/ingest.py {' '.join(args)}; medians of {ns.rounds} rounds")
    for name in FIGURES:
        values = {k: [f[name] for f in v if name in f] for k, v in runs.items()}
        if not values["before"] or not values["after"]:
            continue
        b, a = statistics.median(values["before"]), statistics.median(values["after"])
        print(f"  {name:11} before {b:9.3f}  after {a:9.3f}  after/before {a / b:6.2f}x")


if __name__ == "__main__":
    main()
