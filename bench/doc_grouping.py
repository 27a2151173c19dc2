"""Document grouping against the passage list, on the judged sets with per-document qrels.

Run by hand after ``bench/judged_sets.py embed``/``lanes`` (the lanes cached there)::

    PYTHONPATH=src python bench/doc_grouping.py nfcorpus arguana

Fusion is the default (``search/fusion.py``). Rows:

- ``passages``: the list a search shows today — the top 10 (for nDCG@10) or 100 (R@100) fused
  passages, each counted as its document (a document's second passage adds nothing, so a
  top 10 of passages may show fewer than 10 documents);
- ``document max``: ``group="document"`` as the search runs it — ``top_k × 5`` passages
  (``search/grouping.py``, capped at the 200 candidates) ranked as documents by their best;
- ``document max+β``: the same with the next passages added damped (``s1 + β·s2 + β²·s3 …``).
"""

from __future__ import annotations

import pickle
import sys

from judged_sets import CACHE, SETS, calibrated, judged

DAMPINGS = (0.1, 0.2, 0.3, 0.5)


def _runs(name: str, split: str, damping: float | None) -> tuple[dict, dict]:
    """Runs for nDCG@10 and R@100: ``{query: {doc: score}}`` (damping None: the passage list)."""
    from knowbase.search.fusion import FusionSettings, fuse
    from knowbase.search.grouping import PASSAGES_PER_DOCUMENT, document_scores

    with (CACHE / name / "lanes.pickle").open("rb") as fh:
        cached = pickle.load(fh)[split]
    at10: dict[str, dict[str, float]] = {}
    at100: dict[str, dict[str, float]] = {}
    for qid, (v, k) in cached.items():
        doc = {u: m for u, m, _ in [*v, *k]}
        v = calibrated(name, v)
        vec, kw = [(u, s) for u, _, s in v], [(u, s) for u, _, s in k]
        fused = fuse(vec, kw, FusionSettings()) if vec else kw
        hits = [(doc[u], float(s)) for u, s in fused[:200]]
        if name == "arguana":
            hits = [(d, s) for d, s in hits if d != qid]  # the set's self-hits
        for top, run in ((10, at10), (100, at100)):
            if damping is None:
                docs: dict[str, float] = {}
                for d, s in hits[:top]:
                    docs.setdefault(d, s)
            else:
                pool = hits[: min(top * PASSAGES_PER_DOCUMENT, 200)]
                docs = {d: s for d, s, _ in document_scores(pool, damping)[:top]}
            run[qid] = docs
    return at10, at100


def main(names: list[str]) -> None:
    from knowbase.eval.metrics import evaluate_run

    cols = [(n, sp) for n in names if (CACHE / n / "lanes.pickle").is_file() for sp in SETS[n][1]]
    print("setting".ljust(22) + "".join(f"{n}/{sp} nDCG@10 R@100".rjust(30) for n, sp in cols))
    rows = [("passages", None), ("document max", 0.0)]
    rows += [(f"document max+{b}", b) for b in DAMPINGS]
    for label, damping in rows:
        cells = []
        for n, sp in cols:
            _, qrels = judged(n)[sp]
            at10, at100 = _runs(n, sp, damping)
            m10, _ = evaluate_run(at10, qrels)
            m100, _ = evaluate_run(at100, qrels)
            shown = sum(len(d) for d in at10.values()) / max(1, len(at10))
            cells.append(f"{m10['ndcg@10']:.4f} {m100['recall@100']:.4f} ({shown:.1f} docs)")
        print(label.ljust(22) + "".join(c.rjust(30) for c in cells), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(SETS))
