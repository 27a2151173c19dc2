"""Per-model cosine calibration (issue 40 item 1), measured from the model itself.

Run by hand::

    PYTHONPATH=src python bench/calibration.py                 # both local models
    PYTHONPATH=src python bench/calibration.py sweep           # the sweep on calibrated lanes

The sample is fixed and model-independent: the 163 passages of ``eval/en`` (no queries, no
judgements). Pairs of passages from different topics (the id's prefix: ``bread``, ``git``…)
are unrelated, pairs of one topic related. ``lo`` is the median cosine of unrelated pairs,
``hi`` the 90th percentile of related pairs; a cosine maps to ``(cos − lo) / (hi − lo)``,
clipped to [0, 1]. ``sweep`` replays ``bench/judged_sets.py``'s sweep with the vector lane's
cosines so mapped (the cached lanes, nothing re-embedded).
"""

from __future__ import annotations

import json
import sys

import numpy as np

from judged_sets import CACHE, MODELS, ROOT, SETS

LOCAL = ("local:all-minilm-l6-v2", "local:multilingual-e5-small")


def measure(model: str) -> tuple[float, float]:
    from knowbase.providers.registry import get_embedding_provider
    from knowbase.settings import Settings

    rows = [json.loads(line) for line in (ROOT / "eval/en/corpus.jsonl").open(encoding="utf-8")]
    provider = get_embedding_provider(model, Settings(home=CACHE / "home"))
    vecs = np.asarray(provider.embed([f"{r['title']}\n\n{r['text']}" for r in rows]), np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    cos = vecs @ vecs.T
    topic = np.array([r["_id"].rsplit("-", 1)[0] for r in rows])
    same = topic[:, None] == topic[None, :]
    upper = np.triu(np.ones_like(same), 1).astype(bool)
    lo = float(np.median(cos[upper & ~same]))
    hi = float(np.quantile(cos[upper & same], 0.9))
    return lo, hi


def sweep(calibrations: dict[str, tuple[float, float]]) -> None:
    import judged_sets as js
    from knowbase.eval.judged import SWEEP_GRID
    from knowbase.search.fusion import FusionSettings

    original = js.score_run

    def calibrated(name, split, setting):  # noqa: ANN001, ANN202
        import pickle

        lo, hi = calibrations[MODELS.get(name, js.MODEL)]
        path = CACHE / name / "lanes.pickle"
        with path.open("rb") as fh:
            lanes = pickle.load(fh)
        mapped = {
            sp: {
                q: ([(u, m, max(0.0, (s - lo) / (hi - lo))) for u, m, s in v], k)
                for q, (v, k) in qs.items()
            }
            for sp, qs in lanes.items()
        }
        tmp = CACHE / name / "lanes-calibrated.pickle"
        with tmp.open("wb") as fh:
            pickle.dump(mapped, fh)
        return mapped

    cols = [(n, sp) for n in SETS if (CACHE / n / "lanes.pickle").is_file() for sp in SETS[n][1]]
    for n in {n for n, _ in cols}:
        calibrated(n, None, None)
    grid = [FusionSettings("convex", a) for a in (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 0.8)]
    print("setting".ljust(24) + "".join(f"{n}/{sp}".rjust(16) for n, sp in cols))
    for setting in ["vector", *grid]:
        label = setting if isinstance(setting, str) else setting.label()
        figures = []
        for n, sp in cols:
            real = CACHE / n / "lanes.pickle"
            real.rename(CACHE / n / "lanes-raw.pickle")
            (CACHE / n / "lanes-calibrated.pickle").rename(real)
            try:
                figures.append(original(n, sp, setting)["ndcg@10"])
            finally:
                real.rename(CACHE / n / "lanes-calibrated.pickle")
                (CACHE / n / "lanes-raw.pickle").rename(real)
        print(label.ljust(24) + "".join(f"{f:16.4f}" for f in figures), flush=True)
    del SWEEP_GRID


if __name__ == "__main__":
    found = {m: measure(m) for m in LOCAL}
    for m, (lo, hi) in found.items():
        print(f"{m}: lo (median unrelated) {lo:.4f}, hi (p90 related) {hi:.4f}", flush=True)
    if sys.argv[1:2] == ["sweep"]:
        if sys.argv[2:] == ["band"]:  # the unrelated band to 0, a cosine of 1 stays 1
            found = {m: (lo, 1.0) for m, (lo, _) in found.items()}
        sweep(found)
