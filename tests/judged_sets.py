"""The shipped judged sets (``eval/en``, ``eval/zh``, BEIR layout) and a base built from one.

``build_base`` does what ``kb import-beir`` does (one Markdown file per corpus entry, the doc id
read back from the Concept ID by ``kb eval``), through ``Knowledge`` instead of the CLI.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from knowbase.catalog.models import Base
from knowbase.eval.beir import CorpusDoc, file_name, read_corpus, read_qrels, read_queries
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

JUDGED = Path(__file__).resolve().parents[1] / "eval"


def judged_set(
    lang: str,
) -> tuple[dict[str, CorpusDoc], dict[str, str], dict[str, dict[str, int]]]:
    """``(corpus by doc id, queries, qrels)`` of ``eval/<lang>``."""
    folder = JUDGED / lang
    corpus = {d.doc_id: d for d in read_corpus(folder)}
    return corpus, read_queries(folder / "queries.jsonl"), read_qrels(folder / "qrels/test.tsv")


def stage(folder: Path, into: Path) -> int:
    """Write ``folder``'s corpus as Markdown files under ``into/<folder name>``; their count."""
    out = into / folder.name
    out.mkdir()
    n = 0
    for doc in read_corpus(folder):
        (out / file_name(doc.doc_id)).write_text(doc.markdown(), encoding="utf-8")
        n += 1
    return n


def build_base(kb: Knowledge, lang: str, model: str | None, name: str | None = None) -> Base:
    """A base holding ``eval/<lang>`` embedded with ``model`` (None: BM25-only), indexed."""
    base = kb.create_base(
        name or f"{lang}-{(model or 'bm25').split(':')[-1].split('?')[0]}",
        embedding_model_id=model,
        file_processor_id=None,
    )
    with tempfile.TemporaryDirectory(prefix="kb-judged-") as tmp:
        n = stage(JUDGED / lang, Path(tmp))
        kb.add(base.name, [AddInput.directory(Path(tmp) / lang)], wait=True, timeout_s=900)
    counts = kb.counts(base.id)
    assert counts == {"completed": n}, counts  # the files (a folder is no file: issue 42)
    return base
