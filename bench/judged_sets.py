"""Judged sets for choosing the fusion default: lanes cached once, every setting scored from them.

Run by hand (minutes of CPU for the public sets)::

    PYTHONPATH=src python bench/judged_sets.py embed nfcorpus     # MiniLM vectors, cached
    PYTHONPATH=src python bench/judged_sets.py lanes nfcorpus     # index + both lanes, cached
    PYTHONPATH=src python bench/judged_sets.py sweep              # the table, every cached set

Sets: ``en`` and ``zh`` (``eval/``, in the repository), ``nfcorpus`` and ``arguana`` (read from
``../shared/datasets/``, never copied: a set that is not there is skipped with the reason).
The corpus goes through the real reader, chunker (MiniLM's 256/32 tokens, its tokenizer) and
contextual unit text; the index is the real SQLite store; the lanes are its keyword and vector
lanes with their absolute scores; fusion is ``search/fusion.py``'s. Chunk hits collapse to
documents by their best chunk, as ``kb eval`` does. ArguAna: a document equal to the query is
dropped (the set's self-hits). The cache lives in ``$KB_EVAL_CACHE`` (default
``~/.cache/knowbase-eval``), outside the repository.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("KB_DATASETS", ROOT.parent / "shared" / "datasets"))
if not SHARED.is_dir():
    SHARED = Path("/work/shared/datasets")
CACHE = Path(os.environ.get("KB_EVAL_CACHE", Path.home() / ".cache" / "knowbase-eval"))
MODEL = os.environ.get("KB_EVAL_MODEL", "local:all-minilm-l6-v2")  # e.g. the int8 graph
# eval/zh runs on the multilingual model, as docs/eval.md's earlier tables: MiniLM cannot read
# Chinese, so the script rule makes nearly every zh query keyword-only and no fusion matters.
MODELS = {"zh": "local:multilingual-e5-small"}
# ArguAna on two shared cores: two fixed random query subsets (seed 29, dev and test, disjoint)
# over a corpus cut to their judged and self documents plus random others up to ARGUANA_DOCS
# (embedding all 8,674 documents took too long here). Figures are for that cut, not the set.
ARGUANA_QUERIES = 100
ARGUANA_DOCS = 800
LANE = 1000

SETS = {
    "en": (ROOT / "eval" / "en", {"test": "test"}),
    "zh": (ROOT / "eval" / "zh", {"test": "test"}),
    "nfcorpus": (SHARED / "nfcorpus", {"dev": "dev", "test": "test"}),
    "arguana": (SHARED / "arguana", {"dev": "test", "test": "test"}),
}


def _open(path: Path) -> io.TextIOBase:
    gz = path.with_name(path.name + ".gz")
    if path.is_file():
        return path.open(encoding="utf-8")
    return io.TextIOWrapper(gzip.open(gz), encoding="utf-8")


def _jsonl(path: Path) -> Iterator[dict]:
    with _open(path) as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def available(name: str) -> str | None:
    """None when the set can be read, else why not."""
    folder = SETS[name][0]
    if not (folder / "corpus.jsonl").is_file() and not (folder / "corpus.jsonl.gz").is_file():
        return f"{name}: no corpus at {folder} (public sets live in ../shared/datasets/)"
    return None


def judged(name: str) -> dict[str, tuple[dict[str, str], dict[str, dict[str, int]]]]:
    """``{split: (queries, qrels)}``; ArguAna's splits are two disjoint fixed random subsets."""
    from knowbase.eval.beir import read_qrels

    folder, splits = SETS[name]
    texts = {str(r["_id"]): str(r.get("text") or "") for r in _jsonl(folder / "queries.jsonl")}
    out = {}
    for split, file in splits.items():
        qrels = read_qrels(folder / "qrels" / f"{file}.tsv")
        qrels = {q: {d: g for d, g in j.items() if g > 0} for q, j in qrels.items()}
        qrels = {q: j for q, j in qrels.items() if j and q in texts}
        if name == "arguana":
            ids = sorted(qrels)
            random.Random(29).shuffle(ids)
            pick = ids[:ARGUANA_QUERIES] if split == "dev" else ids[-ARGUANA_QUERIES:]
            qrels = {q: qrels[q] for q in pick}
        out[split] = ({q: texts[q] for q in qrels}, qrels)
    return out


def corpus_cut(name: str) -> set[str] | None:
    """The documents kept of a cut set (ArguAna), else None (the whole corpus)."""
    if name != "arguana":
        return None
    keep: set[str] = set()
    for queries, qrels in judged(name).values():
        keep |= set(queries) | {d for j in qrels.values() for d in j}
    ids = sorted(str(r["_id"]) for r in _jsonl(SETS[name][0] / "corpus.jsonl"))
    random.Random(29).shuffle(ids)
    for doc in ids:
        if len(keep) >= ARGUANA_DOCS:
            break
        keep.add(doc)
    return keep


def units(name: str, provider) -> list[tuple[str, str, str, list]]:  # noqa: ANN001
    """``(doc id, title, content text, chunks)`` per corpus document, as a base would index it."""
    from knowbase.eval.beir import CorpusDoc, file_name
    from knowbase.pipeline.documents import ChunkSettings
    from knowbase.pipeline.indexing.chunking import chunk_documents
    from knowbase.pipeline.readers.markdown import read_markdown_text

    settings = ChunkSettings(chunk_size=256, chunk_overlap=32, token_cap=254)
    keep = corpus_cut(name)
    out = []
    for row in _jsonl(SETS[name][0] / "corpus.jsonl"):
        if keep is not None and str(row["_id"]) not in keep:
            continue
        doc = CorpusDoc(str(row["_id"]), str(row.get("title") or ""), str(row.get("text") or ""))
        content, chunks = chunk_documents(
            read_markdown_text(doc.markdown()), settings, count_tokens=provider.count_tokens
        )
        if chunks:
            out.append((doc.doc_id, file_name(doc.doc_id), content, chunks))
    return out


def _provider(name: str = ""):  # noqa: ANN202
    from knowbase.providers.registry import get_embedding_provider
    from knowbase.settings import Settings

    return get_embedding_provider(MODELS.get(name, MODEL), Settings(home=CACHE / "home"))


def _cache(name: str) -> VectorCache:
    model = MODELS.get(name, MODEL).split(":", 1)[1]
    return VectorCache(CACHE / name / ("vectors.npz" if name not in MODELS else f"{model}.npz"))


class VectorCache:
    """``{sha256(text): float32 vector}`` in one ``.npz`` per set, saved as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.vectors: dict[str, np.ndarray] = {}
        if path.is_file():
            with np.load(path) as z:
                self.vectors = dict(zip(z["keys"].tolist(), z["vectors"], strict=True))

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp.npz")
        keys = list(self.vectors)
        np.savez(tmp, keys=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys]))
        tmp.replace(self.path)

    def fill(self, texts: list[str], provider, batch: int = 64, query: bool = False) -> None:  # noqa: ANN001
        from knowbase.units.hashing import text_hash

        embed = getattr(provider, "embed_queries", None) if query else None
        embed = embed or provider.embed
        todo = {("q:" if query else "") + text_hash(t): t for t in texts}
        todo = {h: t for h, t in todo.items() if h not in self.vectors}
        items = sorted(todo.items(), key=lambda kv: len(kv[1]))
        start, last = time.monotonic(), time.monotonic()
        for i in range(0, len(items), batch):
            part = items[i : i + batch]
            vecs = np.asarray(embed([t for _, t in part]), dtype=np.float32)
            self.vectors.update({h: v for (h, _), v in zip(part, vecs, strict=True)})
            if time.monotonic() - last > 60:
                self.save()
                last = time.monotonic()
                done = i + len(part)
                rate = done / (last - start)
                print(f"  {done}/{len(items)} texts, {rate:.1f}/s", flush=True)
        if items:
            self.save()


def embed(name: str) -> None:
    """Embed the set's unit texts and queries into the cache."""
    from knowbase.units.context import unit_text

    provider = _provider(name)
    docs = units(name, provider)
    texts = [unit_text(title, c.locator, c.text) for _, title, _, cs in docs for c in cs]
    queries = [t for qs, _ in judged(name).values() for t in qs.values()]
    print(f"{name}: {len(docs)} documents, {len(texts)} units, {len(queries)} queries", flush=True)
    cache = _cache(name)
    cache.fill([q.strip() for q in queries], provider, query=True)
    cache.fill(texts, provider)


def lanes(name: str) -> None:
    """Index the set in a real SQLite store (cached vectors) and cache both lanes per query."""
    from knowbase.index.base import MaterialInput
    from knowbase.index.sqlite.store import SqliteIndexStore
    from knowbase.search.coverage import script_coverage
    from knowbase.units.context import chunk_text
    from knowbase.units.hashing import text_hash

    provider = _provider(name)
    cache = _cache(name)
    path = CACHE / name / "index.sqlite"
    for old in path.parent.glob("index.sqlite*"):
        old.unlink()
    dims = len(next(iter(cache.vectors.values())))
    store = SqliteIndexStore.open(path, base_id=name, dims=dims, model_id=MODELS.get(name, MODEL))
    started = time.monotonic()
    try:
        for doc_id, title, content, chunks in units(name, provider):
            vectors = {
                text_hash(c.text): cache.vectors[text_hash(chunk_text(title, c))] for c in chunks
            }
            store.rebuild_material(MaterialInput(doc_id, title, content, chunks, title), vectors)
        built = time.monotonic() - started
        out: dict[str, dict[str, tuple[list, list]]] = {}
        for split, (queries, _) in judged(name).items():
            out[split] = {}
            for qid, text in queries.items():
                v = []
                if script_coverage(text.strip(), provider.scripts)["covered"]:  # the rule
                    h = text_hash(text.strip())
                    vec = cache.vectors.get("q:" + h, cache.vectors.get(h))
                    v = [(h.unit_id, h.material_id, h.score) for h in store.vector_lane(vec, LANE)]
                k = [(h.unit_id, h.material_id, h.score) for h in store.keyword_lane(text, LANE)]
                out[split][qid] = (v, k)
    finally:
        store.close()
    with (CACHE / name / "lanes.pickle").open("wb") as fh:
        pickle.dump(out, fh)
    print(f"{name}: indexed in {built:.1f} s, lanes cached", flush=True)


def calibrated(name: str, v: list) -> list:
    """The vector lane's ``(unit, material, cosine)`` with the cosines as search fuses them
    (``search/calibration.py``; ``KB_EVAL_RAW=1``: as they are, the figures before it)."""
    from knowbase.search.calibration import calibrate

    if os.environ.get("KB_EVAL_RAW"):
        return v
    model = MODELS.get(name, MODEL)
    return [(u, m, calibrate(s, model)) for u, m, s in v]


def _min_max(hits: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """The per-query min-max normalisation convex fusion used before (for the 'before' row)."""
    if not hits:
        return []
    lo, hi = min(s for _, s in hits), max(s for _, s in hits)
    return [(u, (s - lo) / (hi - lo) if hi > lo else 1.0) for u, s in hits]


def score_run(name: str, split: str, setting) -> dict[str, float]:  # noqa: ANN001
    """nDCG@10 and recall@100 of one fusion setting ('bm25', 'vector', 'minmax-0.8', or a
    ``FusionSettings``) from the cached lanes, as ``kb eval``'s hybrid lane computes them."""
    from knowbase.eval.metrics import evaluate_run
    from knowbase.search.fusion import FusionSettings, fuse

    with (CACHE / name / "lanes.pickle").open("rb") as fh:
        cached = pickle.load(fh)[split]
    _, qrels = judged(name)[split]
    run: dict[str, dict[str, float]] = {}
    for qid, (v, k) in cached.items():
        doc = {u: m for u, m, _ in [*v, *k]}
        if not (isinstance(setting, str) and setting.startswith("minmax-")):
            v = calibrated(name, v)  # the previous default fused raw cosines
        vec, kw = [(u, s) for u, _, s in v], [(u, s) for u, _, s in k]
        use = setting
        if not vec and use != "vector":  # a query the model cannot read: keyword only
            use = "bm25"
        if use == "bm25":
            fused = kw
        elif use == "vector":
            fused = vec
        elif isinstance(use, str) and use.startswith("minmax-"):
            alpha = float(use.split("-")[1])
            fused = fuse(_min_max(vec), _min_max(kw), FusionSettings("convex", alpha))
        else:
            assert isinstance(use, FusionSettings)
            fused = fuse(vec, kw, use)
        docs: dict[str, float] = {}
        for u, score in fused[:200]:
            d = doc[u]
            if name == "arguana" and d == qid:
                continue  # ArguAna's self-hits
            docs.setdefault(d, float(score))
            if len(docs) == 100:
                break
        run[qid] = docs
    means, _ = evaluate_run(run, qrels)
    return means


def sweep_all(names: list[str]) -> None:
    """Print nDCG@10 per set and split for the lanes, the old default and the sweep grid."""
    from knowbase.eval.judged import SWEEP_GRID
    from knowbase.search.fusion import FusionSettings

    grid = ["bm25", "vector", "minmax-0.8", *SWEEP_GRID]
    grid += [FusionSettings("convex", a) for a in (0.1, 0.15, 0.25, 0.35, 0.45, 0.55)]
    cols = [(n, sp) for n in names if (CACHE / n / "lanes.pickle").is_file() for sp in SETS[n][1]]
    print("setting".ljust(24) + "".join(f"{n}/{sp}".rjust(16) for n, sp in cols))
    for setting in grid:
        label = setting if isinstance(setting, str) else setting.label()
        figures = [score_run(n, sp, setting)["ndcg@10"] for n, sp in cols]
        print(label.ljust(24) + "".join(f"{f:16.4f}" for f in figures), flush=True)


def main(argv: list[str]) -> None:
    cmd, names = argv[0], argv[1:] or list(SETS)
    for name in names:
        why = available(name)
        if why:
            print(f"skipped: {why}")
            continue
        if cmd == "embed":
            embed(name)
        elif cmd == "lanes":
            lanes(name)
    if cmd == "sweep":
        sweep_all(names)


if __name__ == "__main__":
    main(sys.argv[1:])
