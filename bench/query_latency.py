"""Hybrid search end to end against the bare model's query encode, in one run.

    .venv/bin/python bench/query_latency.py --chunks 20000 --per-item 40   # ~10k chunks

Builds a hybrid base on ``local:all-minilm-l6-v2`` (its vectors come from the hash provider,
widened to 384 dims, so the build takes seconds, not minutes: the search cost does not depend
on what the vectors mean). ``--text real`` (default): the notes are ``--chunks`` docstring
paragraphs of the standard library (``search_scale.paragraphs``), ``--per-item`` to a note,
chunk size 100 tokens (short paragraphs share a chunk: 20,000 paragraphs make ~10.4k chunks),
and each query is the first ten words of a paragraph the base does not hold. ``--text
synthetic``: ``ingest.py``'s paragraphs over a 40-word vocabulary, so every query term is in
most chunks and FTS5 ranks thousands of rows per query (the keyword lane's worst case). Then,
for ``--queries`` distinct queries, alternately times the bare model
(the ONNX graph's encode of ``[q]`` the provider runs, same process; torch's
``SentenceTransformer.encode`` before issue 30) and ``Knowledge.search`` (script check,
query embedding, both lanes, fusion, visibility). Prints p50/p90 of each, their ratio (target
<= 1.3) and a repeated query's p50 (the per-model LRU).

Measured 2026-12-04 (stop 19), quiet 2-core machine, one run per line:

    real text, 10,422 chunks     bare encode p50   hybrid p50   ratio   repeated query
      numpy BLAS on 2 threads        31.1 ms         43.0 ms    1.38x       7.8 ms
      numpy BLAS on 1 thread         15.5 ms         31.2 ms    2.01x      10.4 ms
    synthetic, 8,736 chunks
      numpy BLAS on 2 threads        34.4 ms         58.9 ms    1.71x      21.0 ms
      numpy BLAS on 1 thread         10.7 ms         27.8 ms    2.59x      12.6 ms

The first lines are the trap the earlier figure (1.73x) fell into: OpenBLAS's threads spin on
both cores for a while after the vector lane's product, and the next torch forward pass runs
beside them -- the search's own query encode, and the bare encode timed right after a search
(alone it takes 13-16 ms). ``providers/local.py`` now keeps numpy's BLAS on one thread once
torch runs: searches got 1.4-2.1x faster, and the bare reference is honest again. **The 1.3
target is missed**: beyond the encode a search costs ~10 ms on this corpus (keyword lane ~4 ms,
run beside the encode but sharing its two cores; vector lane ~2.3 ms; visibility, fusion and
the facade ~3.6 ms).

Stop 20, the same command, quiet: bare encode p50 12.2 ms, hybrid p50 24.6 ms, **2.02x**.
Why 1.3x cannot be reached on 2 cores with these lanes, measured piece by piece (p50 at 10.4k
chunks): the provider's ``embed([q])`` is 15.3 ms against the bare model's 14.8 (the issue's
lost ~30 ms are gone); 1.3x leaves ~4.5 ms for everything else, but FTS5's own bm25 ranking of
a 10-word query (the raw statement, ~2,400 matching chunks) takes 2.7 ms, joining its winners
to units 1.1 ms, the matrix product 0.4 ms, the vector hits' owner lookup ~0.7 ms and the
catalog's visibility read ~1.2 ms: ~6 ms of SQL and BLAS before any Python. Running the
keyword lane beside the encode does not hide it: torch uses both cores, and the encode then
takes 22.9 ms instead of 15.3 (run serially the search costs about the same).
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

    from knowbase.operations.add.inputs import AddInput
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
            from knowbase.providers import minilm_onnx

            session, encoder = provider._load_session()

            class Bare:  # the model alone: tokenize and one forward pass, no gate or batcher
                def encode(self, texts, show_progress_bar=False):  # type: ignore[no-untyped-def]
                    return minilm_onnx.encode(session, encoder, texts)

            bare_model = Bare()
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
