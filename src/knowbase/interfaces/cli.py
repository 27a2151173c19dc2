"""``kb``: the command line. Each command opens ``Knowledge``, calls one method, renders.

Errors are turned into ``code: message`` (+ hint) in one place, :func:`main`. ``--json`` prints
machine-readable output on stdout. Exit codes: 0 ok, 1 error, 3 detect-strategy conflicts.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from knowbase.errors import KnowbaseError

if TYPE_CHECKING:  # imported where a command runs: ``kb --help`` stays light
    from knowbase.catalog.models import Base, Item
    from knowbase.ingestion.add import AddResult
    from knowbase.ingestion.inputs import AddInput
    from knowbase.jobs.model import Job
    from knowbase.service import Knowledge

app = typer.Typer(
    name="kb",
    no_args_is_help=True,
    add_completion=False,
    help="knowbase: local-first knowledge bases for AI apps and agents.",
)
base_app = typer.Typer(no_args_is_help=True, help="Create, list, show, delete, restore bases.")
app.add_typer(base_app, name="base")
console = Console()
err_console = Console(stderr=True)

HomeOpt = Annotated[
    str | None,
    typer.Option("--home", envvar="KNOWBASE_HOME", help="Home directory (env KNOWBASE_HOME)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]

EXIT_CONFLICTS = 3


# --- shared helpers (also used by cli_concepts / cli_serve) ------------------------------------
@contextmanager
def open_kb(home: str | None, **overrides: Any) -> Iterator[Knowledge]:
    """Open the home's ``Knowledge`` for one command."""
    from knowbase.service import Knowledge
    from knowbase.settings import load_settings

    kb = Knowledge(load_settings(home, **overrides))
    try:
        yield kb
    finally:
        kb.close()


def to_jsonable(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return to_jsonable(value.to_dict())
    if is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def emit(data: Any, as_json: bool, render: Callable[[], None]) -> None:
    """Print ``data`` as JSON with ``--json``, else call ``render`` for the rich view."""
    if as_json:
        sys.stdout.write(json.dumps(to_jsonable(data), ensure_ascii=False, indent=2) + "\n")
    else:
        render()


# --- bases ----------------------------------------------------------------------------------
@base_app.command("create")
def base_create(
    name: str,
    embedding: Annotated[
        str | None,
        typer.Option(
            help="Embedding model id, e.g. local:all-minilm-l6-v2 or ollama:bge-m3. "
            "Without it the base is BM25-only (keyword search)."
        ),
    ] = None,
    rerank: Annotated[str | None, typer.Option(help="Rerank model id (profile:model).")] = None,
    processor: Annotated[
        str | None, typer.Option(help="File processor for scans/images: 'tesseract' or 'none'.")
    ] = None,
    chunk_size: Annotated[int | None, typer.Option(help="Tokens per chunk.")] = None,
    chunk_overlap: Annotated[int | None, typer.Option(help="Token overlap.")] = None,
    allow_local_urls: Annotated[
        bool, typer.Option(help="Allow fetching private/loopback addresses.")
    ] = False,
    if_not_exists: Annotated[bool, typer.Option(help="Succeed if the base exists.")] = False,
    index_backend: Annotated[
        str | None,
        typer.Option(
            help="Where the index lives: sqlite (a file in the base; the embedded default), "
            "postgres (the catalog's PostgreSQL + pgvector; the default there) or qdrant "
            "(vectors in Qdrant at qdrant_url, else its local mode)."
        ),
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a knowledge base."""
    with open_kb(home) as kb:
        if if_not_exists:
            existing = [b for b in kb.list_bases() if b.name.casefold() == name.strip().casefold()]
            if existing:
                emit(existing[0], as_json, lambda: console.print(f"base [bold]{name}[/] exists"))
                return
        extra: dict[str, Any] = {"allow_local_urls": allow_local_urls}
        if processor is not None:
            extra["file_processor_id"] = None if processor == "none" else processor
        for key, value in (
            ("chunk_size", chunk_size),
            ("chunk_overlap", chunk_overlap),
            ("rerank_model_id", rerank),
            ("index_backend", index_backend),
        ):
            if value is not None:
                extra[key] = value
        base = kb.create_base(name, embedding_model_id=embedding, **extra)

        def render() -> None:
            mode = (
                f"hybrid ({base.embedding_model_id}, {base.dimensions} dims)"
                if (base.embedding_model_id)
                else "BM25-only (no embedding model; keyword search)"
            )
            console.print(f"created base [bold]{base.name}[/] {base.id}: {mode}")

        emit(base, as_json, render)


@base_app.command("list")
def base_list(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """List bases."""
    with open_kb(home) as kb:
        bases = kb.list_bases()
        rows = [(b, kb.counts(b.id)) for b in bases]

    def render() -> None:
        table = Table("name", "id", "status", "model", "items")
        for b, counts in rows:
            items = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "0"
            table.add_row(b.name, b.id, b.status, b.embedding_model_id or "BM25-only", items)
        console.print(table)

    emit([b for b, _ in rows], as_json, render)


@base_app.command("show")
def base_show(base: str, home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Show a base's settings."""
    with open_kb(home) as kb:
        b = kb.get_base(base)
        counts = kb.counts(b.id)
    data = {**b.to_dict(), "item_counts": counts}
    emit(data, as_json, lambda: console.print_json(json.dumps(data, default=str)))


@base_app.command("delete")
def base_delete(
    base: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    home: HomeOpt = None,
) -> None:
    """Delete a base and everything in it."""
    with open_kb(home) as kb:
        b = kb.get_base(base)
        if not yes:
            typer.confirm(f"Delete base {b.name!r} and all its items?", abort=True)
        kb.delete_base(b.id)
    console.print(f"deleted base {b.name}")


@base_app.command("restore")
def base_restore(
    source: str,
    name: str,
    embedding: Annotated[str | None, typer.Option(help="Model for the new base.")] = None,
    no_wait: Annotated[bool, typer.Option("--no-wait")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build a new base NAME from SOURCE's stored copies."""
    with open_kb(home) as kb:
        result = kb.restore_base(source, name, embedding_model_id=embedding)
        if not no_wait and result.job_ids:
            follow(kb, result.base.id, result.job_ids, quiet=as_json)
    emit(
        result,
        as_json,
        lambda: console.print(
            f"restored into [bold]{result.base.name}[/]; skipped "
            f"{result.skipped_missing_source_count} items whose source is missing"
        ),
    )


@base_app.command("enable-embedding")
def base_enable_embedding(
    base: str,
    model: str,
    no_wait: Annotated[bool, typer.Option("--no-wait")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Turn a BM25-only base into a hybrid one, embedding the stored chunks (no re-read)."""
    with open_kb(home) as kb:
        b = kb.enable_embedding_model(base, model)
        switch = kb.model_switch(b.id)
        if not no_wait and switch and switch["status"] in ("pending", "running"):
            follow(kb, b.id, [switch["job_id"]], quiet=as_json)
        b = kb.get_base(b.id)
    emit(b, as_json, lambda: console.print(f"{b.name} now uses {b.embedding_model_id}"))


@base_app.command("set-embedding")
def base_set_embedding(
    base: str,
    model: str,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Start it and return.")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Switch the base's embedding model: the new vectors are built beside the old ones from the
    stored chunks (no source re-read); searches use the old model until the swap."""
    with open_kb(home) as kb:
        status = kb.set_embedding_model(base, model)
        if not no_wait and status.get("status") in ("pending", "running"):
            follow(kb, kb.get_base(base).id, [status["job_id"]], quiet=as_json)
            status = kb.model_switch(base) or status
        b = kb.get_base(base)
    out = {"base": b, "switch": status}

    def render() -> None:
        if status.get("status") in ("completed", "swapped"):
            console.print(f"{b.name} now uses {b.embedding_model_id} ({b.dimensions} dims)")
        elif status.get("status") in ("pending", "running"):
            console.print(f"switching {b.name} to {model} in the background: {status['job_id']}")
        else:
            why = status.get("error_message") or status.get("status")
            console.print(f"switch of {b.name} to {model} ended {status['status']}: {why}")
            console.print(f"{b.name} still uses {b.embedding_model_id}")

    emit(out, as_json, render)
    if status.get("status") in ("failed", "cancelled"):
        raise typer.Exit(1)


@base_app.command("set")
def base_set(
    base: str,
    threshold: Annotated[float | None, typer.Option()] = None,
    document_count: Annotated[int | None, typer.Option(help="Search top-K.")] = None,
    rerank: Annotated[str | None, typer.Option(help="Rerank model id; 'none' clears.")] = None,
    processor: Annotated[str | None, typer.Option(help="'tesseract' or 'none'.")] = None,
    fusion: Annotated[str | None, typer.Option(help="Hybrid fusion: 'rrf' or 'convex'.")] = None,
    fusion_alpha: Annotated[float | None, typer.Option(help="Vector lane weight, 0..1.")] = None,
    rrf_k: Annotated[int | None, typer.Option(help="RRF constant k (rrf fusion).")] = None,
    sync_deletes: Annotated[
        bool | None,
        typer.Option(
            "--sync-deletes/--no-sync-deletes",
            help="kb sync deletes items whose files vanished (without --prune).",
        ),
    ] = None,
    url_max_age: Annotated[
        int | None,
        typer.Option(help="Seconds after which kb sync re-fetches a page; -1: never."),
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a base's settings (no reindex)."""
    patch: dict[str, Any] = {
        k: v
        for k, v in {"fusion": fusion, "fusion_alpha": fusion_alpha, "rrf_k": rrf_k}.items()
        if v is not None
    }
    if threshold is not None:
        patch["threshold"] = threshold
    if document_count is not None:
        patch["document_count"] = document_count
    if rerank is not None:
        patch["rerank_model_id"] = None if rerank == "none" else rerank
    if processor is not None:
        patch["file_processor_id"] = None if processor == "none" else processor
    if sync_deletes is not None:
        patch["sync_deletes"] = sync_deletes
    if url_max_age is not None:
        patch["url_max_age"] = None if url_max_age < 0 else url_max_age
    with open_kb(home) as kb:
        b = kb.update_base(base, **patch)
    emit(b, as_json, lambda: console.print(f"updated {b.name}"))


# --- items ----------------------------------------------------------------------------------
def _inputs_for(targets: list[str], note: str | None, title: str | None) -> list[AddInput]:
    from knowbase.ingestion.inputs import AddInput

    inputs: list[AddInput] = []
    for target in targets:
        if target.startswith(("http://", "https://")):
            inputs.append(AddInput.web(target))
        elif Path(target).is_dir():
            inputs.append(AddInput.directory(target))
        else:
            inputs.append(AddInput.file(target))
    if note is not None:
        text = sys.stdin.read() if note == "-" else note
        inputs.append(AddInput.note(text, title=title))
    return inputs


@app.command("add")
def add(
    base: str,
    targets: Annotated[list[str] | None, typer.Argument(help="Files, folders or URLs.")] = None,
    note: Annotated[
        str | None, typer.Option(help="Add a note with this text ('-': stdin).")
    ] = None,
    title: Annotated[str | None, typer.Option(help="Title of the note.")] = None,
    conflict: Annotated[str, typer.Option(help="rename | detect | replace")] = "rename",
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Return once queued.")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add files, folders, web pages or a note, and index them (waits with progress bars)."""
    inputs = _inputs_for(targets or [], note, title)
    if not inputs:
        raise typer.BadParameter("give at least one file, folder or URL, or --note")
    with open_kb(home) as kb:
        b = kb.get_base(base)
        _warn_model_cannot_read(kb, b, targets or [])
        result = kb.add(b.id, inputs, strategy=conflict)  # type: ignore[arg-type]
        if result.status == "conflicts":
            emit(result, as_json, lambda: _render_conflicts(result))
            raise typer.Exit(EXIT_CONFLICTS)
        if not no_wait:
            follow(kb, b.id, result.job_ids, quiet=as_json)
        items = [kb.get_item(b.id, i.id) for i in result.items]
    emit(
        {"status": result.status, "items": items, "job_ids": result.job_ids},
        as_json,
        lambda: _render_items(items),
    )


def _warn_model_cannot_read(kb: Knowledge, b: Base, targets: list[str]) -> None:
    """On stderr: suggest a multilingual model when the files are mostly CJK (never applied)."""
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    hint = kb.model_hint(b, local)
    if hint:
        from rich.markup import escape

        err_console.print(f"[yellow]hint:[/] {escape(hint)}", soft_wrap=True)


def _render_conflicts(result: AddResult) -> None:
    console.print("[yellow]conflicts — nothing was added:[/]")
    for c in result.conflicts:
        console.print(f"  {c.type}: {c.title}")


def _render_items(items: list[Item]) -> None:
    table = Table("item", "type", "status", "concept id / error")
    for item in items:
        detail = (
            item.concept_id or ""
            if item.status != "failed"
            else (f"[red]{item.error_code}[/]: {item.error_message}")
        )
        table.add_row(item.title, item.type, item.status, detail)
    console.print(table)


def follow(kb: Knowledge, base_id: str, job_ids: list[str], *, quiet: bool = False) -> None:
    """Run workers here and show one progress bar per queued job tree until all are done."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    kb.start_workers()
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[stage]}"),
            TimeElapsedColumn(),
            console=err_console,
            disable=quiet,
            transient=False,
        ) as progress:
            tasks = {}
            for job_id in job_ids:
                job = kb.get_job(job_id)
                label = _job_label(kb, base_id, job)
                tasks[job_id] = progress.add_task(label, total=100, stage="queued")
            while True:
                done = True
                for job_id, task in tasks.items():
                    tree = kb.job_tree([job_id])
                    finished = sum(1 for j in tree if j.is_terminal)
                    live = [j for j in tree if not j.is_terminal]
                    if live:
                        done = False
                        current = live[-1]
                        stage = current.progress_stage or current.status
                        pct = current.progress_percent or 0
                        if len(tree) > 1:
                            stage = f"{stage} ({finished}/{len(tree)} jobs)"
                            pct = 100 * finished / len(tree)
                        progress.update(task, completed=pct, stage=stage)
                    else:
                        failed = [j for j in tree if j.status != "completed"]
                        stage = f"[red]{len(failed)} failed[/]" if failed else "done"
                        progress.update(task, completed=100, stage=stage)
                if done:
                    break
                time.sleep(0.2)
    finally:
        kb.stop_workers()


def _job_label(kb: Knowledge, base_id: str, job: Job) -> str:
    item_id = job.payload.get("item_id")
    if item_id:
        try:
            return (kb.get_item(base_id, item_id).title or item_id)[:40]
        except KnowbaseError:
            return item_id
    return job.kind.removeprefix("knowledge.")


@app.command("search")
def search(
    base: str,
    query: str,
    top_k: Annotated[int | None, typer.Option("--top-k", "-k")] = None,
    under: Annotated[
        str | None,
        typer.Option(
            "--under", metavar="PATH", help="Only documents in this folder (Concept ID prefix)."
        ),
    ] = None,
    types: Annotated[
        list[str] | None,
        typer.Option(
            "--type",
            metavar="TYPE",
            help="Only this source type: a file extension (pdf, md, docx…), url or note. "
            "Repeat it or give a comma list.",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DATE",
            help="Only items updated at or after this ISO date or datetime (UTC unless given).",
        ),
    ] = None,
    context: Annotated[
        int | None,
        typer.Option(
            "--context",
            metavar="TOKENS",
            help="Return each hit with its neighbouring chunks, within TOKENS; hits of one "
            "document that touch are merged (exact offsets).",
        ),
    ] = None,
    explain: Annotated[bool, typer.Option(help="Show how the search ran.")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search a base; prints cited results (Concept ID, locator, score)."""
    with open_kb(home) as kb:
        response = kb.search(
            base, query, top_k=top_k, under=under, types=types, since=since, context=context
        )

    def render() -> None:
        if not response.results:
            console.print("no results")
        for r in response.results:
            where = r.concept_id or r.title or r.item_id
            loc = ", ".join(
                f"{k} {' › '.join(map(str, v)) if isinstance(v, list) else v}"
                for k, v in (r.locator or {}).items()
            )
            cite = f"{where}" + (f" ({loc})" if loc else "") + f" [{r.char_start}:{r.char_end}]"
            console.print(f"[bold]{r.rank}.[/] [cyan]{cite}[/]  {r.score_kind} {r.score:.4f}")
            snippet = " ".join(r.text.split())
            console.print(f"   {snippet[:300]}{'…' if len(snippet) > 300 else ''}")
        console.print(f"[dim]mode: {response.mode}[/]")
        if explain:
            console.print_json(json.dumps(response.explain, default=str))

    emit(response, as_json, render)


@app.command("status")
def status(
    base: Annotated[str | None, typer.Argument(help="A base; without it: readiness.")] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Items by status with errors (for a base), or the readiness of every component."""
    with open_kb(home) as kb:
        if base is None:
            from knowbase.readiness import readiness

            report = readiness(kb)
            live = next(c for c in report["components"] if c["component"] == "workers")

            def render_report() -> None:
                console.print_json(json.dumps(report, default=str))
                _render_workers(live["details"].get("workers", []))

            emit(report, as_json, render_report)
            return
        b = kb.get_base(base)
        counts = kb.counts(b.id)
        failed = kb.list_items(b.id, statuses=["failed"])
        queued = kb.count_jobs(base=b.id, statuses=["pending", "running"])
        workers = kb.list_workers()
        skipped = {i.title: i.data["skipped"] for i in kb.list_items(b.id) if i.data.get("skipped")}
        from knowbase.readiness import base_vector_lane, lane_line

        lane = base_vector_lane(kb, b)
    data = {
        "base": b,
        "counts": counts,
        "failed": failed,
        "active_jobs": queued,
        "live_workers": len(workers),
        "workers": workers,
        "skipped": skipped,
        "vector_lane": lane,
    }

    def render() -> None:
        console.print(
            f"[bold]{b.name}[/] ({b.status}) — "
            + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "empty")
        )
        if lane and lane.get("lane") != "none":
            console.print(lane_line(lane))
        if queued:
            note = "" if workers else " — queued, no worker running (run: kb worker)"
            console.print(f"{queued} active jobs{note}")
        for item in failed:
            hint = f" — {item.error_message}" if item.error_message != item.error_code else ""
            console.print(f"  [red]failed[/] {item.title}: {item.error_code}{hint}")
        for folder, report in skipped.items():
            parts = ", ".join(f"{r}: {v['count']}" for r, v in report.items())
            console.print(f"  skipped in {folder}: {parts}")
        _render_workers([w.to_dict() for w in workers])

    emit(data, as_json, render)


def _render_workers(workers: list[dict[str, Any]]) -> None:
    """One line per live worker (every host): id, pid, heartbeat age, jobs held."""
    if not workers:
        return
    table = Table("worker", "host", "pid", "heartbeat", "jobs held", box=None)
    for w in workers:
        age = f"{w['heartbeat_age_s']:.1f} s ago"
        table.add_row(w["id"], w["host"], str(w["pid"]), age, str(w["jobs_held"]))
    console.print(table)


@app.command("jobs")
def jobs(
    base: Annotated[str | None, typer.Option(help="Only this base.")] = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Include completed jobs.")] = False,
    limit: Annotated[int, typer.Option(min=1, help="Show this many, newest first.")] = 200,
    before: Annotated[
        str | None, typer.Option(help="Page on: only jobs created before this job id.")
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List active and failed jobs, newest first."""
    statuses = None if all_jobs else ["pending", "running", "failed"]
    with open_kb(home) as kb:
        found = kb.list_jobs(base=base, statuses=statuses, limit=limit, before=before)

    def render() -> None:
        table = Table("id", "kind", "status", "attempts", "progress", "error")
        for j in found:
            prog = (
                f"{j.progress_stage or ''} {j.progress_percent or 0:.0f}%"
                if j.progress_stage
                else ""
            )
            table.add_row(
                j.id,
                j.kind.removeprefix("knowledge."),
                j.status,
                f"{j.attempts}/{j.max_attempts}",
                prog,
                j.error_code or "",
            )
        console.print(table)

    emit(found, as_json, render)


@app.command("retry")
def retry(
    base: str,
    no_wait: Annotated[bool, typer.Option("--no-wait")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-run the failed items of a base (rebuilt from the stored copies)."""
    with open_kb(home) as kb:
        job_id = kb.retry_failed(base)
        if job_id and not no_wait:
            follow(kb, kb.get_base(base).id, [job_id], quiet=as_json)
        counts = kb.counts(base)
    emit(
        {"job_id": job_id, "counts": counts},
        as_json,
        lambda: console.print(
            "nothing to retry"
            if job_id is None
            else ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        ),
    )


@app.command("worker")
def worker(
    threads: Annotated[int | None, typer.Option(help="Worker threads.")] = None,
    nice: Annotated[
        int,
        typer.Option(
            min=0,
            max=19,
            help="Lower this process's CPU priority by this much (POSIX nice): imports then "
            "use the CPU that searches leave.",
        ),
    ] = 0,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch", help="Also keep every base current: sync it when its origins change."
        ),
    ] = False,
    home: HomeOpt = None,
) -> None:
    """Run job workers until interrupted (Ctrl-C / SIGTERM)."""
    import signal
    import threading

    from knowbase.interfaces.cli_serve import watching

    if nice and hasattr(os, "nice"):
        os.nice(nice)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open_kb(home) as kb:
        kb.start_workers(threads=threads)
        err_console.print(
            f"worker running{' and watching origins' if watch else ''}; Ctrl-C to stop"
        )
        with watching(kb, enabled=watch):
            try:
                while not stop.wait(0.5):
                    pass
            except KeyboardInterrupt:
                pass


def _register_plugins() -> None:
    """Commands defined next to their surface (concepts + MCP, HTTP serve)."""
    import importlib

    for name in (
        "knowbase.interfaces.cli_concepts",
        "knowbase.interfaces.cli_serve",
        "knowbase.interfaces.cli_sync",
        "knowbase.interfaces.cli_eval",
        "knowbase.interfaces.cli_portable",
    ):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(app)


_register_plugins()


def main() -> None:
    """Entry point: one error edge for every command."""
    try:
        # standalone_mode=False returns the exit code of typer.Exit instead of raising it.
        rc = app(standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except KnowbaseError as exc:
        if "--json" in sys.argv:
            sys.stdout.write(json.dumps(to_jsonable(exc.to_dict()), ensure_ascii=False) + "\n")
        err_console.print(f"[red]{exc.code}[/]: {exc.message}")
        if exc.hint:
            err_console.print(f"hint: {exc.hint}")
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(1)
    except Exception as exc:  # usage errors: a message and exit 2, never a traceback
        # typer vendors its own click (typer._click), so check the shape, not click's class.
        show, exit_code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(exit_code, int):
            show()
            sys.exit(exit_code)
        raise


if __name__ == "__main__":
    main()
