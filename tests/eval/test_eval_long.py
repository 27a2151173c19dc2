"""The long-document judged set (``eval/long``: Click, Flask and Jinja's own docs) and the
keyword lane's quality across chunk sizes (issue 29 item 5) — no model needed.

The lane figures with MiniLM, contextual units on and off and small-to-big are what
``bench/long_docs.py`` prints; ``docs/eval.md`` has them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from judged_sets import JUDGED
from knowbase.eval.beir import file_name, read_corpus, read_qrels, read_queries
from knowbase.eval.metrics import evaluate_run
from knowbase.index.base import MaterialInput
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.pipeline.documents import ChunkSettings
from knowbase.pipeline.indexing.chunking import chunk_documents, chunk_settings_for_window
from knowbase.pipeline.readers.markdown import read_markdown_text

LONG = JUDGED / "long"
MINILM_WINDOW = 256  # all-MiniLM-L6-v2's input window: its bases chunk to 256/32 tokens


def _answers() -> list[dict]:
    lines = (LONG / "answers.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_long_set_parses_every_answer_lies_in_its_section_and_documents_are_long() -> None:
    corpus = {d.doc_id: d for d in read_corpus(LONG)}
    queries = read_queries(LONG / "queries.jsonl")
    qrels = read_qrels(LONG / "qrels" / "test.tsv")
    assert 40 <= len(corpus) <= 60 and 30 <= len(queries) <= 60
    assert set(qrels) == set(queries)
    words = sorted(len(d.text.split()) for d in corpus.values())
    assert words[len(words) // 2] >= 700  # median: several MiniLM chunks per document
    answers = _answers()
    assert {a["query_id"] for a in answers} == set(queries)
    for a in answers:
        assert qrels[a["query_id"]][a["corpus_id"]] == 2, a
        text = corpus[a["corpus_id"]].text
        head = re.search(r"(?m)^(#+) " + re.escape(a["section"]) + "$", text)
        assert head is not None, a
        level = len(head.group(1))
        nxt = re.compile(rf"(?m)^#{{1,{level}}} ").search(text, head.end())
        end = nxt.start() if nxt else len(text)
        assert a["needle"] in text[head.end() : end], a  # inside the answering section


def _keyword_ndcg(folder: Path, settings: ChunkSettings, tmp_path: Path) -> float:
    """Document nDCG@10 of the keyword lane of a store chunked with ``settings``."""
    path = tmp_path / f"{folder.name}-{settings.chunk_size}.sqlite"
    store = SqliteIndexStore.open(path, base_id="b", dims=None)
    try:
        for doc in read_corpus(folder):
            content, chunks = chunk_documents(read_markdown_text(doc.markdown()), settings)
            name = file_name(doc.doc_id)
            store.rebuild_material(MaterialInput(doc.doc_id, name, content, chunks, name), {})
        run = {}
        for qid, text in read_queries(folder / "queries.jsonl").items():
            docs: dict[str, float] = {}
            for hit in store.keyword_lane(text, 100):
                docs.setdefault(hit.material_id, hit.score)
            run[qid] = docs
    finally:
        store.close()
    return evaluate_run(run, read_qrels(folder / "qrels" / "test.tsv"))[0]["ndcg@10"]


@pytest.mark.parametrize("name", [pytest.param("long", marks=pytest.mark.slow), "zh", "en"])
def test_a_small_window_bases_keyword_lane_scores_at_least_a_bm25_only_bases(
    name: str, tmp_path: Path
) -> None:
    """Issue 29 item 5: a MiniLM base's 256-token chunks do not cost its keyword lane (which
    queries the model cannot read run alone) against a BM25-only base's 1024/200 chunks."""
    size, overlap = chunk_settings_for_window(MINILM_WINDOW)
    small = ChunkSettings(chunk_size=size, chunk_overlap=overlap, token_cap=MINILM_WINDOW - 2)
    big = ChunkSettings(*chunk_settings_for_window(None))
    folder = JUDGED / name
    assert _keyword_ndcg(folder, small, tmp_path) >= _keyword_ndcg(folder, big, tmp_path)
