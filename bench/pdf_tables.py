"""PDF → Markdown table structure: ICDAR-2013 adjacency F1 and seconds per page, per converter.

    PYTHONPATH=src .venv/bin/python bench/pdf_tables.py            # every installed candidate
    PYTHONPATH=src .venv/bin/python bench/pdf_tables.py -c knowbase -v   # one, per table

Reads the development sets ``../shared/tables-dev`` (21 real PDFs, 24 primary tables) and
``../shared/tables-dev-2`` (10 PDFs from tabula-java's tests, 14 primary tables; see their
READMEs) and reports each (``--set`` picks one); a set that is absent is skipped with the
reason. Never point it at ICDAR 2013,
SciFact or CMRC: those check the project from outside.

Metric (the set's README, "Scoring"): every cell is normalised (NFKC, ``<s>`` tags stripped,
whitespace collapsed); each non-empty cell is paired with its nearest non-empty neighbour to the
right and below; precision/recall/F1 of the pair multisets. Each expected table is matched with
the converter's table on the same page that scores best (0 when there is none); "F1" is the
mean over the primary lines, "micro" the F1 of the pairs summed over all of them (large tables
weigh more). Converter tables are read back from the Markdown the converter
emits (pipe tables; ``**``, ``<br>`` and ``<sup>`` markup removed), so a converter scores what a
reader of its Markdown would see. Expected rows holding right-to-left text (``arabic.pdf``,
``indictb1h_14.pdf``) are camelot's and tabula's visual order: they are also tried with each
word reversed and brought to logical order (``knowbase.pipeline.readers.bidi``), and the best
score counts.

Seconds per page: wall time of converting page 1 (the expected page) of each file, in this
process, after one warm-up file; the libraries' import time is left out.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
import unicodedata
from collections import Counter
from collections.abc import Callable
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"
SETS = {"tables-dev": SHARED / "tables-dev", "tables-dev-2": SHARED / "tables-dev-2"}
AGPL_DIR = Path("/tmp/agpl")  # where `pip install --target /tmp/agpl pymupdf` put the reference


# --- scoring ---------------------------------------------------------------------------------


def norm(cell: str) -> str:
    cell = unicodedata.normalize("NFKC", cell).replace("<s>", "").replace("</s>", "")
    return re.sub(r"\s+", " ", cell).strip()


def adjacency(rows: list[list[str]]) -> Counter:
    grid = [[norm(c) for c in r] for r in rows]
    pairs: Counter = Counter()
    for i, row in enumerate(grid):
        for j, cell in enumerate(row):
            if not cell:
                continue
            right = next((x for x in row[j + 1 :] if x), None)
            down = next(
                (grid[k][j] for k in range(i + 1, len(grid)) if j < len(grid[k]) and grid[k][j]),
                None,
            )
            if right:
                pairs[(cell, right, "R")] += 1
            if down:
                pairs[(cell, down, "D")] += 1
    return pairs


def counts(expected: list[list[str]], predicted: list[list[str]]) -> tuple[int, int, int]:
    """(true positive, predicted, expected) adjacency pairs."""
    e, p = adjacency(expected), adjacency(predicted)
    return sum((e & p).values()), sum(p.values()), sum(e.values())


def f1_of(tp: int, n_pred: int, n_exp: int) -> float:
    if tp == 0:
        return 0.0
    prec, rec = tp / n_pred, tp / n_exp
    return 2 * prec * rec / (prec + rec)


def f1(expected: list[list[str]], predicted: list[list[str]]) -> float:
    return f1_of(*counts(expected, predicted))


_MARKUP = re.compile(r"\*\*|__|<br\s*/?>|</?sup>|</?sub>|~~|</?b>|</?i>")


def markdown_tables(markdown: str) -> list[list[list[str]]]:
    """The pipe tables of ``markdown``: runs of lines starting with ``|``, separators dropped."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*markdown.split("\n"), ""]:
        s = line.strip()
        if s.startswith("|"):
            cells = re.split(r"(?<!\\)\|", s.strip("|"))
            if all(re.fullmatch(r"\s*:?-{1,}:?\s*", c) for c in cells if c.strip()) and any(
                "-" in c for c in cells
            ):
                continue
            current.append([_MARKUP.sub(" ", c).replace("\\|", "|").strip() for c in cells])
        elif current:
            tables.append(current)
            current = []
    return tables


def _reverse_words(rows: list[list[str]]) -> list[list[str]]:
    return [[" ".join(w[::-1] for w in norm(c).split(" ")) for c in r] for r in rows]


def _logical(rows: list[list[str]]) -> list[list[str]]:
    # The set's rows keep right-to-left text in visual order (camelot's output); since issue 41
    # knowbase stores it in logical order, so compare against the rows brought to that order.
    from knowbase.pipeline.readers.bidi import logical_lines

    return [[logical_lines(unicodedata.normalize("NFKC", c)) for c in r] for r in rows]


def score(expected: list[list[str]], tables: list[list[list[str]]], arabic: bool) -> float:
    return best_match(expected, tables, arabic)[0]


def best_match(
    expected: list[list[str]], tables: list[list[list[str]]], arabic: bool
) -> tuple[float, tuple[int, int, int]]:
    """The best table's F1 and its pair counts (no table: all of the expected pairs missed)."""
    variants = [expected, _reverse_words(expected), _logical(expected)] if arabic else [expected]
    best = (0.0, (0, 0, sum(adjacency(expected).values())))
    for v in variants:
        for t in tables:
            c = counts(v, t)
            if f1_of(*c) > best[0]:
                best = (f1_of(*c), c)
    return best


# --- candidates ------------------------------------------------------------------------------


def _knowbase(path: Path, backend: str = "pdfium", text_tables: str = "stream") -> str:
    from knowbase.pipeline.readers import pdf, pdf_layout

    saved = pdf.BACKEND, pdf_layout.TEXT_TABLES
    pdf.BACKEND, pdf_layout.TEXT_TABLES = backend, text_tables
    try:
        return "\n\n".join(d.text for d in pdf.read_pdf(path, pages=[1]))
    finally:
        pdf.BACKEND, pdf_layout.TEXT_TABLES = saved


def _knowbase_pdfplumber(path: Path) -> str:
    return _knowbase(path, backend="pdfplumber")


def _knowbase_before(path: Path) -> str:
    # The default until this change: pdfminer's parse, pdfplumber's text-strategy tables.
    return _knowbase(path, backend="pdfplumber", text_tables="plumber")


def _pypdf(path: Path) -> str:
    from pypdf import PdfReader

    return PdfReader(str(path)).pages[0].extract_text() or ""


def _pdfplumber(path: Path) -> str:
    import pdfplumber

    with pdfplumber.open(str(path), pages=[1]) as pdf:
        page = pdf.pages[0]
        return "\n\n".join(_to_md(t) for t in page.extract_tables())


def _pdfplumber_text(path: Path) -> str:
    import pdfplumber

    settings = {"vertical_strategy": "text", "horizontal_strategy": "text"}
    with pdfplumber.open(str(path), pages=[1]) as pdf:
        page = pdf.pages[0]
        return "\n\n".join(_to_md(t) for t in page.extract_tables(settings))


def _pypdfium2(path: Path) -> str:
    # Text only: pdfium has no table finder. Its row is the parse-speed floor of a C parser.
    import pypdfium2

    pdf = pypdfium2.PdfDocument(str(path))
    try:
        return pdf[0].get_textpage().get_text_range()
    finally:
        pdf.close()


def _markitdown(path: Path) -> str:
    # markitdown gives no page boundaries; its whole output is scored (all but two files are
    # one page long), which can only help it.
    from markitdown import MarkItDown

    return MarkItDown().convert(str(path)).text_content


def _pymupdf4llm(path: Path) -> str:
    if str(AGPL_DIR) not in sys.path:
        sys.path.append(str(AGPL_DIR))
    import pymupdf4llm

    return pymupdf4llm.to_markdown(str(path), pages=[0], show_progress=False)


def _to_md(rows: list[list[str | None]]) -> str:
    lines = ["| " + " | ".join((c or "").replace("\n", " ") for c in r) + " |" for r in rows]
    if lines:
        lines.insert(1, "|" + "---|" * len(rows[0]))
    return "\n".join(lines)


CANDIDATES: dict[str, tuple[str, Callable[[Path], str]]] = {
    "knowbase": ("Apache-2.0/BSD-3 pdfium parse + MIT pdfplumber table code", _knowbase),
    "knowbase-pdfplumber": ("MIT, the same rules over pdfminer's parse", _knowbase_pdfplumber),
    "knowbase-before": ("MIT, pdfminer + pdfplumber text strategy", _knowbase_before),
    "pypdf": ("BSD-3 (the reader before this change)", _pypdf),
    "pypdfium2": ("Apache-2.0/BSD-3, page text (no table finder)", _pypdfium2),
    "pdfplumber-lines": ("MIT, extract_tables() defaults", _pdfplumber),
    "pdfplumber-text": ("MIT, text strategies", _pdfplumber_text),
    "markitdown": ("MIT (pdfminer.six)", _markitdown),
    "pymupdf4llm": ("AGPL-3.0, reference only", _pymupdf4llm),
}


# --- run -------------------------------------------------------------------------------------


def load_set(set_dir: Path) -> dict[str, list[dict]]:
    by_file: dict[str, list[dict]] = {}
    for line in (set_dir / "expected.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row.get("primary"):
            by_file.setdefault(row["file"], []).append(row)
    return by_file


def _rtl(rows: list[list[str]]) -> bool:
    from knowbase.pipeline.readers.bidi import has_rtl

    return any(has_rtl(unicodedata.normalize("NFKC", c)) for r in rows for c in r)


def run(
    name: str, convert: Callable[[Path], str], set_dir: Path, by_file: dict, verbose: bool
) -> dict:
    files = sorted(by_file)
    convert(set_dir / "files" / files[0])  # warm-up: imports and lazy tables
    scores, seconds, ruled, unruled = [], [], [], []
    total = [0, 0, 0]  # micro: pairs summed over all tables
    for fname in files:
        start = time.perf_counter()
        markdown = convert(set_dir / "files" / fname)
        seconds.append(time.perf_counter() - start)
        tables = markdown_tables(markdown)
        for exp in by_file[fname]:
            s, pairs = best_match(exp["rows"], tables, arabic=_rtl(exp["rows"]))
            total = [a + b for a, b in zip(total, pairs, strict=True)]
            scores.append(s)
            (ruled if exp["flavor"] == "lattice" else unruled).append(s)
            if verbose:
                print(f"  {name:16} {fname:30} t{exp['table_index']} F1 {s:.3f}")
    return {
        "f1": statistics.mean(scores),
        "micro": f1_of(*total),
        "ruled": statistics.mean(ruled),
        "unruled": statistics.mean(unruled),
        "s_per_page": sum(seconds) / len(files),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("-c", "--candidate", action="append", choices=sorted(CANDIDATES))
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--set", action="append", choices=sorted(SETS), dest="sets")
    args = ap.parse_args()
    for set_name in args.sets or list(SETS):
        report(set_name, SETS[set_name], args.candidate, args.verbose)
    return 0


def report(set_name: str, set_dir: Path, candidates: list[str] | None, verbose: bool) -> None:
    """One set's table of candidates."""
    if not (set_dir / "expected.jsonl").is_file():
        print(f"{set_name}: skipped, the set is absent ({set_dir}/expected.jsonl)")
        return
    by_file = load_set(set_dir)
    print(f"{set_name}: {sum(map(len, by_file.values()))} primary tables in {len(by_file)} PDFs")
    head = f"{'candidate':18} {'F1':>6} {'micro':>6} {'ruled':>6} {'unruled':>7} {'s/page':>7}"
    print(head + "  licence")
    for name in candidates or list(CANDIDATES):
        licence, convert = CANDIDATES[name]
        try:
            result = run(name, convert, set_dir, by_file, verbose)
        except ImportError as exc:
            dashes = f"{'-':>6} {'-':>6} {'-':>6} {'-':>7} {'-':>7}"
            print(f"{name:18} {dashes}  not installed ({exc.name})")
            continue
        print(
            f"{name:18} {result['f1']:6.3f} {result['micro']:6.3f} {result['ruled']:6.3f}"
            f" {result['unruled']:7.3f}"
            f" {result['s_per_page']:7.3f}  {licence}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
