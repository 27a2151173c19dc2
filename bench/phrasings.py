"""Does fusing a query with another phrasing of it help? (issue 44 item 2)

Run by hand (a minute or two; the MiniLM rows embed eval/en's 163 passages)::

    PYTHONPATH=src python bench/phrasings.py

The agent's rewrite is simulated with the judged sets' own second phrasings: a query's partner
is another query of the set whose best-graded answers overlap its own by half or more (in
``eval/en``/``eval/zh`` a paraphrase beside an exact-term question; in NFCorpus a second
question on the same topic). For each query that has such a partner, the bench
scores nDCG@10 of the query alone and of the query with its partner as ``also`` — through the
facade, as an agent calls it — on a BM25-only base and (en) a MiniLM base. Documents are the
judged ids (one file per passage, named by its id, added as one folder). It prints one row per
set and base kind.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from knowbase.eval.beir import doc_id_of, file_name
from knowbase.eval.metrics import ndcg_at_k
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


SHARED = ROOT.parent / "shared" / "datasets"


def _lines(path: Path) -> list[str]:
    gz = path.with_name(path.name + ".gz")
    if not path.is_file() and gz.is_file():
        return gzip.decompress(gz.read_bytes()).decode("utf-8").splitlines()
    return path.read_text(encoding="utf-8").splitlines()


def _load(folder: Path) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    corpus = {}
    for line in _lines(folder / "corpus.jsonl"):
        doc = json.loads(line)
        corpus[doc["_id"]] = f"{doc.get('title', '')}\n\n{doc['text']}".strip()
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for line in _lines(folder / "qrels" / "test.tsv")[1:]:
        qid, did, grade = line.strip().split("\t")
        qrels[qid][did] = int(grade)
    queries = {}
    for line in _lines(folder / "queries.jsonl"):
        q = json.loads(line)
        if q["_id"] in qrels:
            queries[q["_id"]] = q["text"]
    return corpus, queries, dict(qrels)


def partners(qrels: dict[str, dict[str, int]], top: int) -> dict[str, str]:
    """Each query's simulated rewrite: the other query whose best-graded answers overlap its
    own most (Jaccard ≥ 0.5; ties by id), when there is one."""
    answers = {q: {d for d, g in r.items() if g == top} for q, r in qrels.items()}
    out = {}
    for q in sorted(answers):
        best, best_j = None, 0.5
        for other in sorted(answers):
            if other == q or not answers[q]:
                continue
            j = len(answers[q] & answers[other]) / len(answers[q] | answers[other])
            if j >= best_j and (best is None or j > best_j):
                best, best_j = other, j
        if best is not None:
            out[q] = best
    return out


def score(kb: Knowledge, base: str, queries, qrels, pairs, use_also: bool) -> float:  # noqa: ANN001
    total = 0.0
    for q, partner in pairs.items():
        also = [queries[partner]] if use_also else []
        found = kb.search(base, queries[q], top_k=10, also=also)
        ranked = list(dict.fromkeys(doc_id_of(r.concept_id or "") for r in found.results))
        total += ndcg_at_k(ranked, qrels[q], 10)
    return total / len(pairs)


def main() -> None:
    rows = []
    sets = [
        ("en", ROOT / "eval" / "en", 2, [None, "local:all-minilm-l6-v2"]),
        ("zh", ROOT / "eval" / "zh", 2, [None]),
        ("nfcorpus", SHARED / "nfcorpus", 2, [None]),
    ]
    for name, folder, top, models in sets:
        if not folder.is_dir():
            print(f"{name}: skipped, {folder} is not here", file=sys.stderr)
            continue
        corpus, queries, qrels = _load(folder)
        pairs = {q: p for q, p in partners(qrels, top).items() if q in queries and p in queries}
        for model in models:
            with tempfile.TemporaryDirectory() as home, Knowledge(Settings(home=Path(home))) as kb:
                b = kb.create_base("set", embedding_model_id=model, file_processor_id=None)
                stage = Path(home) / "corpus"  # one folder add: batched index jobs, as import-beir
                stage.mkdir()
                for did, text in corpus.items():
                    (stage / file_name(did)).write_text(text + "\n", encoding="utf-8")
                kb.add(b.id, [AddInput.directory(str(stage))], wait=True)
                alone = score(kb, b.id, queries, qrels, pairs, use_also=False)
                fused = score(kb, b.id, queries, qrels, pairs, use_also=True)
            rows.append((name, model or "bm25-only", len(pairs), alone, fused))
            print(rows[-1], file=sys.stderr, flush=True)
    print("| set | base | queries with a second phrasing | nDCG@10 alone | with `also` | Δ |")
    print("|---|---|---|---|---|---|")
    for name, model, n, alone, fused in rows:
        print(f"| {name} | {model} | {n} | {alone:.3f} | {fused:.3f} | {fused - alone:+.3f} |")


if __name__ == "__main__":
    sys.exit(main())
