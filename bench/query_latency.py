"""Hybrid search end to end against the bare model's query encode, in one run.

    .venv/bin/python bench/query_latency.py --chunks 10000

Builds a hybrid base on ``local:all-minilm-l6-v2`` with about ``--chunks`` chunks (their
vectors come from the hash provider, widened to 384 dims, so the build takes seconds, not
minutes: the search cost does not depend on what the vectors mean). ``--per-item N`` puts about
N one-paragraph chunks in each note (chunk size 100 tokens; fewer items to ingest: 10k
one-chunk notes take ~10 min to add on two busy cores; the search then checks visibility for
fewer items). Then, for ``--queries``
distinct queries, alternately times the bare model (``SentenceTransformer.encode([q])``, same
process) and ``Knowledge.search`` (script check, query embedding, both lanes, fusion,
visibility). Prints p50/p90 of each, their ratio (target <= 1.3) and a repeated query's p50
(the per-model LRU).

Measured 2026-12-04, ``--chunks 10000 --per-item 20`` (8,736 chunks), quiet 2-core machine:
bare encode p50 25.7 ms, hybrid search p50 44.4 ms: **1.73x, the 1.3 target is missed**; a
repeated query (vector from the LRU) 15.0 ms. A profile of that cached search: ~8 ms waiting
for the keyword lane (this corpus has a ~40-word vocabulary, so every query term matches most
chunks and FTS5 ranks thousands), ~6 ms vector lane (2.8 ms top_k, ~2 ms reading
``vectors_version``), ~2 ms fusion and visibility. On a machine loaded by a CI run the same
command gave 1.03x (the encode slows more than the search).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from ingest import WORDS, paragraph  # noqa: E402
from search_scale import paragraphs  # noqa: E402


def pct(values: list[float], p: float) -> float:
    return sorted(values)[min(len(values) - 1, int(p * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--per-item", type=int, default=1, help="N paragraphs (chunks) per note")
    parser.add_argument(
        "--text",
        choices=("real", "synthetic"),
        default="real",
        help="real: docstring paragraphs, queries from held-out ones; synthetic: ingest.py's "
        "40-word paragraphs (every query term in most chunks: the keyword lane's worst case)",
    )
    args = parser.parse_args()

    from knowbase.ingestion.inputs import AddInput
    from knowbase.providers.hashing_provider import hash_vector
    from knowbase.providers.registry import get_embedding_provider
    from knowbase.service import Knowledge
    from knowbase.settings import Settings

    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        kb = Knowledge(Settings(home=Path(tmp) / "home"))
        try:
            model = "local:all-minilm-l6-v2"
            # chunks of about one paragraph (~80 tokens), as one-paragraph notes give
            size = {} if args.per_item == 1 else {"chunk_size": 100, "chunk_overlap": 0}
            base = kb.create_base("q", embedding_model_id=model, file_processor_id=None, **size)
            provider = get_embedding_provider(model, kb.settings)
            provider.load()

            def fast(texts):  # type: ignore[no-untyped-def]
                return np.stack([hash_vector(t, 384) for t in texts])

            provider.embed = fast  # build only
            n_notes = max(1, args.chunks // args.per_item)
            if args.text == "real":
                texts = paragraphs(args.chunks + args.queries + 10)
                corpus, held = texts[: args.chunks], texts[args.chunks :]
                bodies = [
                    "\n\n".join(corpus[i * args.per_item : (i + 1) * args.per_item])
                    for i in range(n_notes)
                ]
                # a question's worth of words from a paragraph the base does not hold
                queries = [" ".join(t.split()[:10]) for t in held]
            else:
                bodies = [
                    "\n\n".join(paragraph(rng) for _ in range(args.per_item))
                    for _ in range(n_notes)
                ]
                queries = [
                    f"how does the {a} change the {b} over {c} years"
                    for a, b, c in (
                        (rng.choice(WORDS), rng.choice(WORDS), rng.randint(2, 90))
                        for _ in range(args.queries + 10)
                    )
                ]
            notes = [AddInput.note(body) for body in bodies]
            for i in range(0, len(notes), 1000):
                kb.add(base.id, notes[i : i + 1000], wait=True, timeout_s=3600)
            del provider.embed
            items = sum(kb.counts(base.id).values())
            with kb.rt.lease(kb.get_base(base.id)) as store:
                chunks = store.vector_matrix().size
            bare_model = provider._model
            for q in queries[:10]:  # warm both paths
                bare_model.encode([q], show_progress_bar=False)
                kb.search(base.id, q + " warm")
            bare, search = [], []
            for q in queries[10:]:
                t = time.perf_counter()
                bare_model.encode([q], show_progress_bar=False)
                bare.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                response = kb.search(base.id, q)
                search.append((time.perf_counter() - t) * 1000)
                assert response.mode == "hybrid"
            repeated = []
            for _ in range(50):
                t = time.perf_counter()
                kb.search(base.id, queries[-1])
                repeated.append((time.perf_counter() - t) * 1000)
        finally:
            kb.close()
    b50, s50 = statistics.median(bare), statistics.median(search)
    print(f"base             {chunks} chunks in {items} items, {model}, {args.text} text")
    print(f"bare encode      p50 {b50:.1f} ms  p90 {pct(bare, 0.9):.1f} ms")
    print(f"hybrid search    p50 {s50:.1f} ms  p90 {pct(search, 0.9):.1f} ms")
    verdict = "meets" if s50 <= 1.3 * b50 else "misses"
    print(f"ratio            {s50 / b50:.2f} x the bare encode ({verdict} the 1.3 target)")
    print(f"repeated query   p50 {statistics.median(repeated):.1f} ms (query vector from the LRU)")


if __name__ == "__main__":
    main()
