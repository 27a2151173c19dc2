"""The judged-set evaluation the surfaces run (``kb eval``, ``kb import-beir``), from ``eval/``.

A surface reads a BEIR folder's queries, judgements and corpus and writes a TREC run
(``eval/beir.py``); over a base's :meth:`~knowbase.service.Knowledge.eval_context` it scores
each lane and sweeps the fusion (``eval/judged.py``), and shows the metrics by name
(``eval/metrics.py``) against the fusion settings new bases get (``search/fusion.py``).

    >>> ctx = kb.eval_context("docs", read_qrels(qrels))        # doctest: +SKIP
    >>> evaluate(ctx, read_queries(queries), read_qrels(qrels), lanes_of(ctx))
"""

from knowbase.eval.beir import file_name, read_corpus, read_qrels, read_queries, write_run
from knowbase.eval.judged import evaluate, lanes_of, sweep
from knowbase.eval.metrics import METRICS
from knowbase.search.fusion import FusionSettings

__all__ = [
    "METRICS",
    "FusionSettings",
    "evaluate",
    "file_name",
    "lanes_of",
    "read_corpus",
    "read_qrels",
    "read_queries",
    "sweep",
    "write_run",
]
