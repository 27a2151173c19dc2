"""Per-model cosine calibration (issue 40 item 1), measured from the model itself.

Run by hand::

    PYTHONPATH=src python bench/calibration.py                 # both local models
    PYTHONPATH=src python bench/calibration.py sweep           # the sweep on calibrated lanes

The sample is fixed and model-independent: the 163 passages of ``eval/en`` (no queries, no
judgements). Pairs of passages from different topics (the id's prefix: ``bread``, ``git``…)
are unrelated, pairs of one topic related. ``lo`` is the median cosine of unrelated pairs,
``hi`` the 90th percentile of related pairs (for reference). Search maps a cosine to
``(cos − lo) / (1 − lo)``, floored at 0 (``search/calibration.py`` keeps ``lo``; mapping ``hi``
to 1 and clipping flattened every strong match and was dropped, docs/eval.md). ``sweep``
replays the convex grid on ``bench/judged_sets.py``'s cached lanes with the stored bands.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from judged_sets import CACHE, ROOT, SETS

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


def sweep() -> None:
    """nDCG@10 per cached set under convex α with calibrated cosines (``search/calibration.py``'s
    stored bands, as ``judged_sets.score_run`` fuses them; ``KB_EVAL_RAW=1``: raw cosines)."""
    import judged_sets as js
    from knowbase.search.fusion import FusionSettings

    cols = [(n, sp) for n in SETS if (CACHE / n / "lanes.pickle").is_file() for sp in SETS[n][1]]
    grid = [
        FusionSettings("convex", a)
        for a in (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 0.8, 0.9)
    ]
    print("setting".ljust(24) + "".join(f"{n}/{sp}".rjust(16) for n, sp in cols))
    for setting in ["vector", *grid]:
        label = setting if isinstance(setting, str) else setting.label()
        figures = [js.score_run(n, sp, setting)["ndcg@10"] for n, sp in cols]
        print(label.ljust(24) + "".join(f"{f:16.4f}" for f in figures), flush=True)


if __name__ == "__main__":
    found = {m: measure(m) for m in LOCAL}
    for m, (lo, hi) in found.items():
        print(f"{m}: lo (median unrelated) {lo:.4f}, hi (p90 related) {hi:.4f}", flush=True)
    if sys.argv[1:] == ["sweep"]:
        sweep()
