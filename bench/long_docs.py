"""The long-document judged set (``eval/long``): contextual units and small-to-big, measured.

Run by hand (a few minutes of CPU: ~1,000 MiniLM texts, embedded once and cached)::

    PYTHONPATH=src python bench/long_docs.py [--rebuild]   # lanes cached per variant

Variants, each indexed into a real SQLite store: ``ctx`` (MiniLM chunking, 256/32 tokens,
contextual unit text — what a base does now), ``plain`` (the same chunks, unit text = the bare
slice: the keyword text and the embedding as before contextual units) and ``bm25`` (a BM25-only
base's chunking, 1024/200, contextual). Per variant: nDCG@10 of the bm25, vector and hybrid
(convex α = 0.5, the default) lanes, chunk hits collapsed to documents by their best chunk as
``kb eval`` does; and for small-to-big, over the queries whose answering document is among the
top 10 documents of the hybrid lane: how often the answering paragraph's needle
(``eval/long/answers.jsonl``) lies inside that document's best hit, and inside the passage
``search/context.py`` grows around it within 512 tokens. The cache is ``judged_sets.CACHE``.
"""

from __future__ import annotations

import pickle
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judged_sets import CACHE, LANE, MODEL, ROOT, VectorCache, _jsonl  # noqa: E402

SET = ROOT / "eval" / "long"
BUDGET = 512
BIG = 1024  # a BM25-only base's chunk size, for comparison
VARIANTS = ("ctx", "plain", "bm25")


def _docs() -> list[tuple[str, str, str]]:
    return [(str(r["_id"]), str(r["title"]), str(r["text"])) for r in _jsonl(SET / "corpus.jsonl")]


def build(variant: str, provider) -> dict:  # noqa: ANN001
    """Index the set as ``variant`` and return ``{qid: (vector hits, keyword hits)}`` plus units."""
    import knowbase.index.plan as plan
    from knowbase.eval.beir import CorpusDoc, file_name
    from knowbase.index.base import MaterialInput
    from knowbase.index.sqlite.store import SqliteIndexStore
    from knowbase.pipeline.documents import ChunkSettings
    from knowbase.pipeline.indexing.chunking import chunk_documents
    from knowbase.pipeline.readers.markdown import read_markdown_text
    from knowbase.units.context import chunk_text, unit_text
    from knowbase.units.hashing import text_hash

    model = variant != "bm25"
    settings = (
        ChunkSettings(chunk_size=256, chunk_overlap=32, token_cap=254)
        if model
        else ChunkSettings(chunk_size=1024, chunk_overlap=200)
    )
    plan.unit_text = unit_text if variant != "plain" else (lambda _t, _l, body: body)
    cache = VectorCache(CACHE / "long" / "vectors.npz")
    docs = []
    for doc_id, title, text in _docs():
        md = CorpusDoc(doc_id, title, text).markdown()
        count = provider.count_tokens if model else None
        content, chunks = chunk_documents(read_markdown_text(md), settings, count_tokens=count)
        docs.append((doc_id, file_name(doc_id), content, chunks))
    embed = {}
    if model:
        for _, title, _, chunks in docs:
            for c in chunks:
                embed[c.text] = chunk_text(title, c) if variant == "ctx" else c.text
        cache.fill(list(embed.values()), provider)
    queries = {str(r["_id"]): str(r["text"]) for r in _jsonl(SET / "queries.jsonl")}
    if model:
        cache.fill(list(queries.values()), provider, query=True)
    path = CACHE / "long" / f"{variant}.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.glob(f"{variant}.sqlite*"):
        old.unlink()
    store = SqliteIndexStore.open(
        path, base_id="long", dims=384 if model else None, model_id=MODEL if model else None
    )
    out: dict = {"lanes": {}, "units": {}, "text": {}}
    try:
        for doc_id, title, content, chunks in docs:
            vecs = {
                text_hash(c.text): cache.vectors[text_hash(embed[c.text])] for c in chunks if model
            }
            store.rebuild_material(MaterialInput(doc_id, title, content, chunks, title), vecs)
            out["units"][doc_id] = [
                (u.unit_id, u.char_start, u.char_end) for u in store.list_units(doc_id)
            ]
            out["text"][doc_id] = content
        for qid, text in queries.items():
            v = []
            if model:
                vec = cache.vectors["q:" + text_hash(text.strip())]
                v = [(h.unit_id, h.material_id, h.score) for h in store.vector_lane(vec, LANE)]
            k = [(h.unit_id, h.material_id, h.score) for h in store.keyword_lane(text, LANE)]
            out["lanes"][qid] = (v, k)
    finally:
        store.close()
        plan.unit_text = unit_text
    return out


def needle_at(text: str, answer: dict) -> int:
    """Where the answering paragraph's needle is: its first occurrence after the answering
    section's heading (``section`` empty: the document's top)."""
    start = 0
    if answer["section"]:
        found = re.search(r"(?m)^#+ " + re.escape(answer["section"]) + "$", text)
        if found is None:
            raise ValueError(f"{answer['query_id']}: no section {answer['section']!r}")
        start = found.start()
    return text.index(answer["needle"], start)


def _doc_run(hits: list[tuple[str, str, float]]) -> dict[str, float]:
    docs: dict[str, float] = {}
    for _, d, s in hits:
        docs.setdefault(d, float(s))
    return docs


def score(built: dict) -> dict[str, dict]:
    """Per lane: nDCG@10, and small-to-big counts — of the queries, how many have the answering
    paragraph's needle inside the rank-1 hit (``top1``) and inside the passage grown around it
    within 512 tokens (``top1_ctx``); the same for the answering document's best hit (``doc``,
    ``doc_ctx``)."""
    from knowbase.eval.beir import read_qrels
    from knowbase.eval.metrics import evaluate_run
    from knowbase.search.fusion import FusionSettings, fuse

    qrels = read_qrels(SET / "qrels" / "test.tsv")
    answers = {str(r["query_id"]): r for r in _jsonl(SET / "answers.jsonl")}
    runs: dict[str, dict[str, dict[str, float]]] = {"bm25": {}, "vector": {}, "hybrid": {}}
    keys = ("top1", "top1_ctx", "top1_big", "doc", "doc_ctx", "doc_big")
    counts = {lane: dict.fromkeys(keys, 0) for lane in runs}
    for qid, (v, k) in built["lanes"].items():
        doc_of = {u: d for u, d, _ in [*v, *k]}
        fused = (
            fuse(
                [(u, s) for u, _, s in v], [(u, s) for u, _, s in k], FusionSettings("convex", 0.5)
            )
            if v
            else [(u, s) for u, _, s in k]
        )
        lanes = {"bm25": k, "vector": v, "hybrid": [(u, doc_of[u], s) for u, s in fused]}
        for lane, hits in lanes.items():
            runs[lane][qid] = _doc_run(hits)
            if hits:
                for key, value in _answer_in(built, answers[qid], hits).items():
                    counts[lane][key] += value
    out: dict[str, dict] = {}
    for lane, run in runs.items():
        if any(run.values()):
            out[lane] = {"ndcg@10": evaluate_run(run, qrels)[0]["ndcg@10"], **counts[lane]}
    return out


def _answer_in(built: dict, answer: dict, hits: list) -> dict[str, bool]:
    """Whether the needle lies in the rank-1 hit / the answering document's best hit, bare and
    grown to :data:`BUDGET` tokens as ``search/context.py`` grows it."""
    from knowbase.search.context import _grow

    doc = answer["corpus_id"]
    text = built["text"][doc]
    start = needle_at(text, answer)
    end = start + len(answer["needle"])
    out = {}
    for key, pick in (("top1", hits[0]), ("doc", next((h for h in hits if h[1] == doc), None))):
        if pick is None or pick[1] != doc:
            out[key] = out[key + "_ctx"] = out[key + "_big"] = False
            continue
        units = built["units"][doc]
        at = next(n for n, (u, _, _) in enumerate(units) if u == pick[0])
        out[key] = units[at][1] <= start and end <= units[at][2]
        spans = [SimpleNamespace(char_start=s, char_end=e) for _, s, e in units]
        for suffix, budget in (("_ctx", BUDGET), ("_big", BIG)):
            lo, hi = _grow(text, spans, at, budget)
            out[key + suffix] = lo <= start and end <= hi
    return out


def main() -> None:
    from knowbase.providers.registry import get_embedding_provider
    from knowbase.settings import Settings

    provider = get_embedding_provider(MODEL, Settings(home=CACHE / "home"))
    results = {}
    for variant in VARIANTS:
        started = time.monotonic()
        saved = CACHE / "long" / f"{variant}.pickle"
        if saved.is_file() and "--rebuild" not in sys.argv:
            with saved.open("rb") as fh:
                built = pickle.load(fh)
        else:
            built = build(variant, provider)
            with saved.open("wb") as fh:
                pickle.dump(built, fh)
        results[variant] = score(built)
        units = sum(len(u) for u in built["units"].values())
        print(f"{variant}: {units} units, {time.monotonic() - started:.0f} s", flush=True)
    print(
        "variant lane    nDCG@10  answer in: rank-1 hit / +512 / +1024 tokens;"
        " the answering doc's best hit / +512 / +1024"
    )
    for variant, res in results.items():
        for lane, r in res.items():
            top = " / ".join(f"{r[k]:2d}" for k in ("top1", "top1_ctx", "top1_big"))
            doc = " / ".join(f"{r[k]:2d}" for k in ("doc", "doc_ctx", "doc_big"))
            n = len(built["lanes"])
            print(f"{variant:7} {lane:7} {r['ndcg@10']:.4f}   {top};   {doc}   (of {n})")


if __name__ == "__main__":
    main()
