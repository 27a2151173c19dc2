"""BEIR files in and TREC runs out: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/*.tsv``.

BEIR layout (Thakur et al., 2021): ``corpus.jsonl`` lines ``{"_id", "title", "text"}``,
``queries.jsonl`` lines ``{"_id", "text"}``, qrels TSV ``query-id  corpus-id  score`` with a
header line. TREC qrels (``qid 0 docid grade``) are read too.

A corpus entry becomes one Markdown file named after its doc id, percent-encoded so any id is a
safe file name (``/`` and a leading ``.`` are encoded; a dot file would be ignored by the folder
rules); :func:`doc_id_of` reads the id back from a Concept ID.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from knowbase.errors import InvalidInput
from knowbase.eval.metrics import order_run

_SAFE = "-_.~@+=,"
SUFFIX = ".md"


@dataclass(frozen=True)
class CorpusDoc:
    doc_id: str
    title: str
    text: str

    def markdown(self) -> str:
        """The file a corpus entry becomes: ``# title`` (when it has one), then the text."""
        body = self.text.strip()
        return f"# {self.title.strip()}\n\n{body}\n" if self.title.strip() else body + "\n"


def file_name(doc_id: str) -> str:
    """``doc_id`` as a file name: ``"a/b"`` → ``"a%2Fb.md"``, ``".x"`` → ``"%2Ex.md"``."""
    name = quote(doc_id, safe=_SAFE)
    if name.startswith("."):
        name = "%2E" + name[1:]
    return name + SUFFIX


def doc_id_of(concept_id: str) -> str:
    """The doc id a :func:`file_name` came from (the last path segment, decoded)."""
    name = concept_id.rsplit("/", 1)[-1]
    return unquote(name.removesuffix(SUFFIX))


def _jsonl(path: Path) -> Iterator[dict]:
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{path.name} line {n} is not JSON: {exc.msg}") from exc
            if not isinstance(row, dict) or "_id" not in row:
                raise InvalidInput(f"{path.name} line {n} has no '_id'")
            yield row


def read_corpus(path: Path) -> Iterator[CorpusDoc]:
    """The entries of a BEIR ``corpus.jsonl`` (a folder: its ``corpus.jsonl``)."""
    path = path / "corpus.jsonl" if path.is_dir() else path
    if not path.is_file():
        raise InvalidInput(f"no corpus.jsonl at {path}")
    for row in _jsonl(path):
        yield CorpusDoc(str(row["_id"]), str(row.get("title") or ""), str(row.get("text") or ""))


def read_queries(path: Path) -> dict[str, str]:
    """``{query id: text}`` from a BEIR ``queries.jsonl``."""
    return {str(r["_id"]): str(r.get("text") or "") for r in _jsonl(path)}


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``{query id: {doc id: grade}}`` from a BEIR qrels TSV (or a TREC qrels file)."""
    out: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            cols = line.split()
            if not cols:
                continue
            if len(cols) == 4:  # TREC: qid iteration docid grade
                cols = [cols[0], cols[2], cols[3]]
            if len(cols) != 3:
                raise InvalidInput(f"{path.name} line {n}: expected 3 (BEIR) or 4 (TREC) columns")
            try:
                grade = int(float(cols[2]))
            except ValueError:
                if n == 1:
                    continue  # the BEIR header: query-id corpus-id score
                msg = f"{path.name} line {n}: grade {cols[2]!r} is not a number"
                raise InvalidInput(msg) from None
            out.setdefault(cols[0], {})[cols[1]] = grade
    return out


def write_run(path: Path, run: Mapping[str, Mapping[str, float]], tag: str) -> None:
    """A TREC run file (``qid Q0 docid rank score tag``), each query in trec_eval's order."""
    with path.open("w", encoding="utf-8") as fh:
        for qid in sorted(run):
            for rank, doc in enumerate(order_run(run[qid]), start=1):
                fh.write(f"{qid} Q0 {doc} {rank} {float(run[qid][doc])!r} {tag}\n")
