""" "Nothing matched", decided per query: the signals on judged and unmatched queries.

Run by hand after ``bench/judged_sets.py embed``/``lanes`` (lanes and index cached there)::

    PYTHONPATH=src python bench/nothing_matched.py features en zh nfcorpus arguana
    PYTHONPATH=src python bench/nothing_matched.py score en zh nfcorpus arguana

``features`` runs ``eval/unmatched/{en,zh}.jsonl`` (gibberish and off-topic queries) through the
cached index of ``en`` (MiniLM) and ``zh`` (e5) and caches their lanes beside the judged ones.
``score`` replays ``search/matched.py``'s decision on every query: the share of unmatched queries
that return nothing, and the relevant top-10 hits (default fusion) that the decision and the
floor cut, against the per-hit cut it replaces (``search.py``'s 0.2 on hits the keyword lane
did not find).
"""

from __future__ import annotations

import json
import pickle
import sys

from judged_sets import CACHE, LANE, MODELS, ROOT, SETS, _cache, _provider, calibrated, judged

UNMATCHED = {
    "en": ROOT / "eval" / "unmatched" / "en.jsonl",
    "zh": ROOT / "eval" / "unmatched" / "zh.jsonl",
}


def unmatched_queries(lang: str) -> dict[str, str]:
    with UNMATCHED[lang].open(encoding="utf-8") as fh:
        return {(r := json.loads(line))["_id"]: r["text"] for line in fh if line.strip()}


def features(name: str) -> None:
    """Lanes of the unmatched queries on set ``name``'s cached index (``{qid: (v, k)}``)."""
    from knowbase.index.sqlite.store import SqliteIndexStore
    from knowbase.search.coverage import script_coverage

    provider = _provider(name)
    path = CACHE / name / "index.sqlite"
    dims = len(next(iter(_cache(name).vectors.values())))
    model = MODELS.get(name, "local:all-minilm-l6-v2")
    store = SqliteIndexStore.open(path, base_id=name, dims=dims, create=False, model_id=model)
    out = {}
    try:
        for lang in UNMATCHED:
            for qid, text in unmatched_queries(lang).items():
                v = []
                if script_coverage(text, provider.scripts)["covered"]:
                    embed = getattr(provider, "embed_queries", None) or provider.embed
                    vec = embed([text])[0]
                    v = [(h.unit_id, h.material_id, h.score) for h in store.vector_lane(vec, LANE)]
                k = [(h.unit_id, h.material_id, h.score) for h in store.keyword_lane(text, LANE)]
                out[qid] = (v, k)
    finally:
        store.close()
    with (CACHE / name / "unmatched.pickle").open("wb") as fh:
        pickle.dump(out, fh)
    print(f"{name}: {len(out)} unmatched queries' lanes cached", flush=True)


def _decide(v: list, k: list, policy: tuple | str, name: str) -> list[str]:
    """The units a top-10 search keeps under ``policy``: ``"old"`` (the per-hit 0.2 cut on hits
    the keyword lane did not find) or ``(keyword_match, margin, floor)`` (``search/matched.py``)."""
    from knowbase.search.fusion import FusionSettings, fuse
    from knowbase.search.matched import query_matched

    raw = [s for _, _, s in v][:250]  # the verdict reads the lane's own cosines
    # the Turn 3 cut ran on raw cosines; search now fuses calibrated ones
    lane = v if policy == "old" else calibrated(name, v)
    vec, kw = [(u, s) for u, _, s in lane], [(u, s) for u, _, s in k]
    fused = (fuse(vec, kw, FusionSettings()) if vec else kw)[:10]
    lexical = {u for u, _ in kw}
    if policy == "old":
        floor = 0.2
    else:
        keyword_match, margin, floor = policy
        verdict = query_matched(
            raw,
            [s for _, s in kw],
            keyword_match=keyword_match,
            margin=margin,
        )
        if not verdict.matched:
            return []
    return [u for u, s in fused if not vec or u in lexical or s >= floor]


def _load(name: str, file: str) -> dict:
    path = CACHE / name / file
    if not path.is_file():
        return {}
    with path.open("rb") as fh:
        return pickle.load(fh)


def score(names: list[str], policies: list) -> None:  # noqa: ANN001
    """Per policy: unmatched queries → nothing, relevant top-10 hits cut, per set and split."""
    for policy in policies:
        cells = []
        for name in names:
            lanes = _load(name, "unmatched.pickle")
            for lang in UNMATCHED:
                qs = [q for q in lanes if q.startswith(lang + "-")]
                if qs and lang == name:  # en's on the MiniLM base, zh's on the e5 base
                    none = sum(1 for q in qs if not _decide(*lanes[q], policy, name))
                    cells.append(f"{name}:{lang}-unmatched→none {none}/{len(qs)}")
            cached = _load(name, "lanes.pickle")
            for split in SETS[name][1] if cached else ():
                _, qrels = judged(name)[split]
                full = cut = 0
                for qid, (v, k) in cached[split].items():
                    top = _decide(v, k, (0.0, -1e9, 0.0), name)  # everything
                    doc = {u: m for u, m, _ in [*v, *k]}
                    rel = {u for u in top if qrels[qid].get(doc[u], 0) > 0 and doc[u] != qid}
                    full += len(rel)
                    cut += len(rel - set(_decide(v, k, policy, name)))
                cells.append(f"{name}/{split} cut {cut}/{full}")
        print(f"{policy}: " + "; ".join(cells), flush=True)


def dump(names: list[str]) -> None:
    """Per query: best keyword score, best cosine and the dense margin (for choosing)."""
    from knowbase.search.matched import dense_margin

    for name in names:
        rows = [(q, "U", *lanes) for q, lanes in _load(name, "unmatched.pickle").items()]
        for qs in _load(name, "lanes.pickle").values():
            rows += [(q, "J", *lanes) for q, lanes in qs.items()]
        for q, kind, v, k in rows:
            cos = [s for _, _, s in v][:250]
            kw1 = k[0][2] if k else 0.0
            m = dense_margin(cos) if cos else None
            print(f"{name} {kind} {q} kw1={kw1:.3f} cos1={max(cos, default=0):.3f} margin={m}")


if __name__ == "__main__":
    cmd, names = sys.argv[1], sys.argv[2:]
    if cmd == "features":
        for n in names:
            features(n)
    elif cmd == "dump":
        dump(names)
    else:
        grid = [(0.2, m, 0.0) for m in (0.15, 0.2, 0.25)] + [(0.2, 0.2, 0.05), (0.2, 0.2, 0.1)]
        score(names, grid)
