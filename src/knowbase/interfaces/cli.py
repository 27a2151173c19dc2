"""``kb``: the command line. Each command opens ``Knowledge``, calls one method, renders.

Errors are turned into ``code: message`` (+ hint) in one place, :func:`main`. ``--json`` prints
machine-readable output on stdout. Exit codes: 0 ok, 1 error, 3 detect-strategy conflicts.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from knowbase.errors import KnowbaseError
from knowbase.interfaces.cli_progress import follow

if TYPE_CHECKING:  # imported where a command runs: ``kb --help`` stays light
    from knowbase.service import Knowledge


class _Group(typer.core.TyperGroup):
    """The root group: a flag shows no ``<bool>`` type in ``--help`` (typer 0.29 adds one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _hide_flag_types(self)


def _hide_flag_types(command: Any) -> None:
    for param in command.params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    make_help = command.get_help_option

    def get_help_option(ctx: Any) -> Any:
        option = make_help(ctx)
        if option is not None and option.metavar is None:
            option.metavar = ""
        return option

    command.get_help_option = get_help_option
    for sub in (getattr(command, "commands", None) or {}).values():
        _hide_flag_types(sub)


app = typer.Typer(
    name="kb",
    cls=_Group,
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


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            console.print(f"knowbase {version('knowbase')}", highlight=False)
        except PackageNotFoundError:
            console.print("knowbase (not installed)")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """knowbase: local-first knowledge bases for AI apps and agents.

    Exit codes: 0 ok; 1 an error (code: message, and a hint); 2 a usage error; 3 kb add
    --conflict detect found conflicts; 4 kb add ran but some items failed (it names them).
    """


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
    """List bases with their state (empty, processing, ready, failures) and item counts."""
    from knowbase.interfaces.cli_items import base_state

    with open_kb(home) as kb:
        bases = kb.list_bases()
        rows = [(b, kb.counts(b.id)) for b in bases]

    def render() -> None:
        if not rows:
            console.print("no bases yet: kb base create NAME")
            return
        table = Table("name", "id", "state", "model", "items")
        for b, counts in rows:
            items = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "0"
            model = b.embedding_model_id or "BM25-only"
            table.add_row(escape(b.name), b.id, base_state(b, counts), model, items)
        console.print(table)

    emit([b for b, _ in rows], as_json, render)


@base_app.command("show")
def base_show(base: str, home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Show a base's settings, state and item counts."""
    from knowbase.interfaces.cli_items import base_state

    with open_kb(home) as kb:
        b = kb.get_base(base)
        counts = kb.counts(b.id)
    state = base_state(b, counts)
    data = {**b.to_dict(), "state": state, "item_counts": counts}

    def render() -> None:
        table = Table(box=None, show_header=False)
        table.add_row("state", state)
        table.add_row("items", ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "0")
        for key, value in b.to_dict().items():
            if key in ("status", "error") and value in (None, "completed"):
                continue
            table.add_row(key, escape("—" if value is None else str(value)))
        console.print(table)

    emit(data, as_json, render)


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


ENABLE_EMBEDDING_HELP = (
    "Turn a BM25-only base into a hybrid one from the stored text (no source re-read). "
    "When the model reads fewer tokens than the base's chunks hold (a BM25-only base chunks at "
    "1,024 tokens; MiniLM reads 256), the stored text is first re-split to the model's chunk "
    "size and the base's chunk_size / chunk_overlap change to it (1024/200 → 256/32): more, "
    "shorter chunks. A model that reads as much keeps the chunking."
)


@base_app.command("enable-embedding", help=ENABLE_EMBEDDING_HELP)
def base_enable_embedding(
    base: str,
    model: str,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Start it and return.")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """:data:`ENABLE_EMBEDDING_HELP`; says when the chunk size changed."""
    with open_kb(home) as kb:
        before = kb.get_base(base)
        b = kb.enable_embedding_model(base, model)
        switch = kb.model_switch(b.id)
        if not no_wait and switch and switch["status"] in ("pending", "running"):
            follow(kb, b.id, [switch["job_id"]], quiet=as_json)
        b = kb.get_base(b.id)

    def render() -> None:
        if b.embedding_model_id != model:
            console.print(f"enabling {model} on {b.name} in the background (kb status {b.name})")
            return
        console.print(f"{b.name} now uses {b.embedding_model_id}")
        if (b.chunk_size, b.chunk_overlap) != (before.chunk_size, before.chunk_overlap):
            console.print(
                f"chunk size {before.chunk_size} → {b.chunk_size} tokens (overlap "
                f"{before.chunk_overlap} → {b.chunk_overlap}) to fit the model's input; the "
                "stored text was re-split (no source re-read)"
            )

    emit(b, as_json, render)


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
    allow_local_urls: Annotated[
        bool | None,
        typer.Option(
            "--allow-local-urls/--no-allow-local-urls",
            help="Let this base fetch pages on loopback or private addresses.",
        ),
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
    if allow_local_urls is not None:
        patch["allow_local_urls"] = allow_local_urls
    with open_kb(home) as kb:
        b = kb.update_base(base, **patch)
    emit(b, as_json, lambda: console.print(f"updated {b.name}"))


def _render_workers(workers: list[dict[str, Any]]) -> None:
    """One line per live worker (every host): id, pid, heartbeat age, jobs held."""
    if not workers:
        return
    table = Table("worker", "host", "pid", "heartbeat", "jobs held", box=None)
    for w in workers:
        age = f"{w['heartbeat_age_s']:.1f} s ago"
        table.add_row(w["id"], w["host"], str(w["pid"]), age, str(w["jobs_held"]))
    console.print(table)


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
        "knowbase.interfaces.cli_items",
        "knowbase.interfaces.cli_search",
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
