"""all-MiniLM-L6-v2: the ONNX Runtime graph the provider runs vs sentence-transformers on torch.

    .venv/bin/python bench/minilm_runtime.py                  # 192 chunks of ~200 tokens
    .venv/bin/python bench/minilm_runtime.py --chunks 96 --rounds 3

The same chunk texts (docstring paragraphs of the standard library joined to ~150-250 word
pieces, what a 256-token chunk holds) encoded in batches of 32 by both runtimes, in alternating
rounds in one process (the provider's ``embed``: length-sorted passes of 32 on the ONNX graph;
``SentenceTransformer.encode(batch_size=32)``), then a single short query by both. Prints
texts/s and ms per query for each and the ONNX/torch ratios, and the smallest cosine between
the two runtimes' vectors. This decides which runtime imports use (issue 30: "if ONNX Runtime
is faster for batched ingestion too, use it there"). Shared machine: quote the ratios.

Measured 2026-12-06, ``--chunks 96 --rounds 3``, shared 2-core machine (load ~7): ONNX 3.6
texts/s, torch 2.7 (1.36x); one query 24 ms vs 452 ms (torch's spinning threads under load);
min cosine 1.000000. Imports therefore use the ONNX graph too.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from search_scale import paragraphs  # noqa: E402


def chunk_texts(n: int, count_tokens) -> list[str]:  # type: ignore[no-untyped-def]
    """``n`` texts of 150-250 word pieces, built from consecutive paragraphs."""
    out: list[str] = []
    current: list[str] = []
    for para in paragraphs(n * 12):
        current.append(para)
        tokens = count_tokens(" ".join(current))
        if tokens >= 250:
            current = [para]
        elif tokens >= 150:
            out.append(" ".join(current))
            current = []
            if len(out) == n:
                break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=192)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from knowbase.providers.local import LocalMiniLM

    provider = LocalMiniLM()
    provider.load()
    texts = chunk_texts(args.chunks, provider.count_tokens)
    import torch
    from sentence_transformers import SentenceTransformer

    threads = torch.get_num_threads()
    reference = SentenceTransformer(str(provider._path), device="cpu")
    reference.max_seq_length = 256

    def run_onnx() -> np.ndarray:
        return provider.embed(texts)

    def run_torch() -> np.ndarray:
        return reference.encode(
            texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False
        )

    a, b = run_onnx()[:32], run_torch()[:32]  # warm both
    cosine = float(np.min(np.sum(a * b, axis=1)))
    rates: dict[str, list[float]] = {"onnx": [], "torch": []}
    for _ in range(args.rounds):
        for name, fn in (("onnx", run_onnx), ("torch", run_torch)):
            t0 = time.perf_counter()
            fn()
            rates[name].append(len(texts) / (time.perf_counter() - t0))
    query = ["how do I open a file for reading"]
    q_ms: dict[str, list[float]] = {"onnx": [], "torch": []}
    for _ in range(30):
        for name, fn in (
            ("onnx", lambda: provider.embed_queries(query)),
            ("torch", lambda: reference.encode(query, show_progress_bar=False)),
        ):
            t0 = time.perf_counter()
            fn()
            q_ms[name].append((time.perf_counter() - t0) * 1000)
    rate = {k: statistics.median(v) for k, v in rates.items()}
    q = {k: statistics.median(v) for k, v in q_ms.items()}
    print(f"{len(texts)} chunks of 150-250 word pieces, batches of 32, torch threads {threads}")
    print(f"  onnx  {rate['onnx']:6.1f} texts/s   query {q['onnx']:6.1f} ms")
    print(f"  torch {rate['torch']:6.1f} texts/s   query {q['torch']:6.1f} ms")
    print(
        f"  onnx/torch: throughput {rate['onnx'] / rate['torch']:.2f}x, "
        f"query time {q['onnx'] / q['torch']:.2f}x; min cosine between them {cosine:.6f}"
    )


if __name__ == "__main__":
    main()
