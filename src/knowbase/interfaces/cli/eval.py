"""``kb eval`` (lane table, per-query JSON, TREC run, fusion sweep) and ``kb import-beir``.

Registered on the main app by ``interfaces/cli/``; the work is in ``eval/``, reached through
``service/evaluation.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from knowbase.errors import InvalidInput
from knowbase.interfaces.cli import options as cli
from knowbase.interfaces.cli.options import HomeOpt, JsonOpt


def eval_command(
    base: str,
    queries: Annotated[Path, typer.Option(help="BEIR queries.jsonl ({_id, text} lines).")],
    qrels: Annotated[Path, typer.Option(help="Qrels TSV: query-id, corpus-id, score.")],
    sweep: Annotated[
        bool, typer.Option("--sweep", help="Score the hybrid lane over a grid of fusion settings.")
    ] = False,
    run_out: Annotated[
        Path | None, typer.Option("--run-out", help="Write a TREC run file of --lane.")
    ] = None,
    lane: Annotated[
        str | None, typer.Option(help="Lane of --run-out (default: the one the base serves).")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="'shadow': score the new model of a switch in progress."),
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Score the base's lanes (bm25, vector, hybrid, +rerank) on judged queries: nDCG@10,
    recall@10/@100, MRR@10 (trec_eval definitions; nDCG with linear gain)."""
    from knowbase.service import evaluation as ev
    from knowbase.service.evaluation import read_qrels, read_queries, write_run

    judged = read_qrels(qrels)
    asked = read_queries(queries)
    with cli.open_kb(home) as kb:
        ctx = kb.eval_context(base, judged, model=model)
        if ctx.missing:
            total = len({d for docs in judged.values() for d in docs})
            cli.err_console.print(
                f"[yellow]warning:[/] {len(ctx.missing)} of {total} judged document ids are "
                f"not in {escape(base)} (e.g. {escape(sorted(ctx.missing)[0])}): they count "
                "as never found",
                highlight=False,
                soft_wrap=True,
            )
        try:
            lanes = ev.lanes_of(ctx)
            if lane is not None and lane not in lanes:
                raise InvalidInput(f"lane must be one of {lanes}", lane=lane)
            reports = ev.evaluate(ctx, asked, judged, lanes)
            grid = ev.sweep(ctx, asked, judged) if sweep and "hybrid" in lanes else []
        finally:
            ctx.close()
    if run_out is not None:
        chosen = next(r for r in reports if r.lane == (lane or lanes[-1]))
        write_run(run_out, chosen.run, f"knowbase-{chosen.lane}")
    n = len(reports[0].per_query) if reports else 0
    data = {"base": base, "queries": n, "lanes": reports, "sweep": grid, "model": ctx.model}
    title = f"{n} judged queries"
    if ctx.model:
        m = ctx.model
        title += f", shadow vectors of {m['model']} ({m['covered']}/{m['bodies']} bodies)"
    cli.emit(data, as_json, lambda: _render(cli.console, reports, grid, title))


def _render(console: Any, reports: list[Any], grid: list[Any], title: str) -> None:
    from rich.table import Table

    from knowbase.service.evaluation import METRICS

    table = Table("lane", "settings", *METRICS, title=title)
    for r in reports:
        table.add_row(r.lane, r.settings, *(f"{r.metrics[m]:.4f}" for m in METRICS))
    console.print(table)
    if grid:
        from knowbase.service.evaluation import FusionSettings

        best = max(grid, key=lambda r: r.metrics["ndcg@10"])
        default = FusionSettings().label()
        title = "sweep (hybrid, no reranker; * best, (default): new bases' setting)"
        sweep = Table("fusion", *METRICS, title=title)
        for r in grid:
            mark = (" *" if r is best else "") + (" (default)" if r.settings == default else "")
            sweep.add_row(r.settings + mark, *(f"{r.metrics[m]:.4f}" for m in METRICS))
        console.print(sweep)


def import_beir(
    corpus: Annotated[Path, typer.Argument(help="A BEIR folder (or its corpus.jsonl).")],
    base: str,
    embedding: Annotated[
        str | None, typer.Option(help="Model of a new base; without it: BM25-only.")
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build a base from a BEIR corpus.jsonl: one Markdown document per entry, Concept ID
    <folder>/<doc id>.md (the id percent-encoded). Creates the base when it is new."""
    from knowbase import AddInput
    from knowbase.errors import NotFound
    from knowbase.service.evaluation import file_name, read_corpus

    folder = corpus if corpus.is_dir() else corpus.parent
    with cli.open_kb(home) as kb:
        try:
            b = kb.get_base(base)
        except NotFound:
            b = kb.create_base(base, embedding_model_id=embedding)
        with tempfile.TemporaryDirectory(prefix="kb-beir-") as tmp:
            stage = Path(tmp) / (folder.resolve().name or "beir")
            stage.mkdir()
            count = 0
            for doc in read_corpus(corpus):
                (stage / file_name(doc.doc_id)).write_text(doc.markdown(), encoding="utf-8")
                count += 1
            if count == 0:
                raise InvalidInput(f"{corpus} holds no corpus entries")
            result = kb.add(b.id, [AddInput.directory(stage)])
            # the jobs copy the staged folder into raw/: wait before it goes
            cli.follow(kb, b.id, result.job_ids, quiet=as_json)
        counts = kb.counts(b.id)
    data = {"base": b.name, "base_id": b.id, "documents": count, "items": counts}
    cli.emit(data, as_json, lambda: cli.console.print(f"{b.name}: {count} documents, {counts}"))


def register(app: typer.Typer) -> None:
    """Add ``eval`` and ``import-beir`` to ``app``."""
    app.command("eval")(eval_command)
    app.command("import-beir")(import_beir)
