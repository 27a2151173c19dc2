"""The keyword lane on PostgreSQL against SQLite's on the shipped judged sets (issue 14 item 2:
measure it on the project's own set).

Both index the same keyword text (CJK runs as bigrams); SQLite ranks with FTS5's BM25, the
postgres store recomputes that BM25 in SQL over its own totals (``postgres_keyword.py``), not
``ts_rank_cd``. The
figures are printed (``pytest -s``) and written in ``docs/eval.md``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from judged_sets import build_base, judged_set
from knowbase.eval import judged as ev
from knowbase.service import Knowledge
from knowbase.settings import Settings

# nDCG@10 measured when this test was written (docs/eval.md); a floor under each backend
FLOOR = {"en": 0.68, "zh": 0.50}


def _bm25(kb: Knowledge, lang: str, backend: str) -> ev.LaneReport:
    _, queries, qrels = judged_set(lang)
    base = build_base(kb, lang, None)
    assert base.index_backend == backend
    ctx = kb.eval_context(base.name, qrels)
    return ev.evaluate(ctx, queries, qrels, ["bm25"])[0]


def test_keyword_lane_postgres_against_sqlite_on_the_judged_sets(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    figures: dict[tuple[str, str], ev.LaneReport] = {}
    for backend, url in (("sqlite", None), ("postgres", pg_url)):
        (tmp_path / backend).mkdir()
        kb = Knowledge(Settings(home=tmp_path / backend, database_url=url, test_providers=True))
        try:
            for lang in ("en", "zh"):
                figures[backend, lang] = _bm25(kb, lang, backend)
        finally:
            kb.close()
    with capsys.disabled():
        print("\nkeyword lane nDCG@10 / recall@10 / MRR@10 on eval/en and eval/zh")
        for (backend, lang), r in sorted(figures.items()):
            m = r.metrics
            print(f"  {backend:8} {lang}: {m['ndcg@10']:.4f} {m['recall@10']:.4f} "
                  f"{m['mrr@10']:.4f}")  # fmt: skip
        for lang in ("en", "zh"):
            lite, pg = figures["sqlite", lang], figures["postgres", lang]
            for qid, m in lite.per_query.items():
                if m != pg.per_query[qid]:
                    top = [list(r.run[qid])[:3] for r in (lite, pg)]
                    print(f"  differs {qid}: sqlite {top[0]} postgres {top[1]}")
    for (backend, lang), r in figures.items():
        assert r.metrics["ndcg@10"] >= FLOOR[lang], (backend, lang, r.metrics)
    for lang in ("en", "zh"):  # the same BM25 over the same keyword text: close, if not equal
        lite, pg = (figures[b, lang].metrics["ndcg@10"] for b in ("sqlite", "postgres"))
        assert abs(lite - pg) <= 0.02, (lang, lite, pg)
