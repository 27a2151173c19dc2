"""``kb base …``: create, list, show, delete, restore bases; enable, switch or set their model
and settings.

Registered on the main app by ``interfaces/cli/`` (imported late there: run as ``python -m``,
cli.py is ``__main__`` and a module-level import of it would re-import it half-built).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from knowbase.interfaces.cli import options as cli
from knowbase.interfaces.cli.base_settings import setting_options
from knowbase.interfaces.cli.options import HomeOpt, JsonOpt

base_app = typer.Typer(no_args_is_help=True, help="Create, list, show, delete, restore bases.")


@base_app.command("create")
@setting_options(mutable_only=False)
def base_create(
    name: str,
    embedding: Annotated[
        str | None,
        typer.Option(
            help="Embedding model id, e.g. local:all-minilm-l6-v2-int8 or ollama:bge-m3. "
            "Without it the base is BM25-only (keyword search)."
        ),
    ] = None,
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
    *,
    settings: dict[str, Any],
) -> None:
    """Create a knowledge base (its settings: one option each, catalog/base_settings.py)."""
    with cli.open_kb(home) as kb:
        if if_not_exists:
            existing = [b for b in kb.list_bases() if b.name.casefold() == name.strip().casefold()]
            if existing:
                cli.emit(
                    existing[0], as_json, lambda: cli.console.print(f"base [bold]{name}[/] exists")
                )
                return
        extra = {"index_backend": index_backend} if index_backend is not None else {}
        base = kb.create_base(name, embedding_model_id=embedding, **extra, **settings)

        def render() -> None:
            mode = (
                f"hybrid ({base.embedding_model_id}, {base.dimensions} dims)"
                if (base.embedding_model_id)
                else "BM25-only (no embedding model; keyword search)"
            )
            cli.console.print(f"created base [bold]{base.name}[/] {base.id}: {mode}")

        cli.emit(base, as_json, render)


@base_app.command("list")
def base_list(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """List bases with their state (empty, processing, ready, failures) and file counts."""
    from knowbase.interfaces.cli.items import base_state

    with cli.open_kb(home) as kb:
        bases = kb.list_bases()
        rows = [(b, kb.counts(b.id)) for b in bases]

    def render() -> None:
        if not rows:
            cli.console.print("no bases yet: kb base create NAME")
            return
        table = Table("name", "id", "state", "model", "files")
        for b, counts in rows:
            items = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "0"
            model = b.embedding_model_id or "BM25-only"
            table.add_row(escape(b.name), b.id, base_state(b, counts), model, items)
        cli.console.print(table)

    cli.emit([b for b, _ in rows], as_json, render)


@base_app.command("show")
def base_show(base: str, home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Show a base's settings, state and file counts."""
    from knowbase.interfaces.cli.items import base_state

    with cli.open_kb(home) as kb:
        b = kb.get_base(base)
        counts = kb.counts(b.id)
    state = base_state(b, counts)
    data = {**b.to_dict(), "state": state, "item_counts": counts}

    def render() -> None:
        table = Table(box=None, show_header=False)
        table.add_row("state", state)
        table.add_row("files", ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "0")
        for key, value in b.to_dict().items():
            if key in ("status", "error") and value in (None, "completed"):
                continue
            if key.endswith("_at") and isinstance(value, int):
                value = _when(value)  # the JSON keeps epoch milliseconds
            table.add_row(key, escape("—" if value is None else str(value)))
        cli.console.print(table)

    cli.emit(data, as_json, render)


@base_app.command("delete")
def base_delete(
    base: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    home: HomeOpt = None,
) -> None:
    """Delete a base and everything in it."""
    with cli.open_kb(home) as kb:
        b = kb.get_base(base)
        if not yes:
            typer.confirm(f"Delete base {b.name!r} and all its items?", abort=True)
        kb.delete_base(b.id)
    cli.console.print(f"deleted base {b.name}")


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
    with cli.open_kb(home) as kb:
        result = kb.restore_base(source, name, embedding_model_id=embedding)
        if not no_wait and result.job_ids:
            cli.follow(kb, result.base.id, result.job_ids, quiet=as_json)
    cli.emit(
        result,
        as_json,
        lambda: cli.console.print(
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


@base_app.command(
    "enable-embedding",
    help=ENABLE_EMBEDDING_HELP,
    short_help="Turn a BM25-only base hybrid from the stored text (may re-split its chunks).",
)
def base_enable_embedding(
    base: str,
    model: str,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Start it and return.")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """:data:`ENABLE_EMBEDDING_HELP`; says when the chunk size changed."""
    with cli.open_kb(home) as kb:
        before = kb.get_base(base)
        b = kb.enable_embedding_model(base, model)
        switch = kb.model_switch(b.id)
        if not no_wait and switch and switch["status"] in ("pending", "running"):
            cli.follow(kb, b.id, [switch["job_id"]], quiet=as_json)
        b = kb.get_base(b.id)

    def render() -> None:
        if b.embedding_model_id != model:
            cli.console.print(
                f"enabling {model} on {b.name} in the background (kb status {b.name})"
            )
            return
        cli.console.print(f"{b.name} now uses {b.embedding_model_id}")
        if (b.chunk_size, b.chunk_overlap) != (before.chunk_size, before.chunk_overlap):
            cli.console.print(
                f"chunk size {before.chunk_size} → {b.chunk_size} tokens (overlap "
                f"{before.chunk_overlap} → {b.chunk_overlap}) to fit the model's input; the "
                "stored text was re-split (no source re-read)"
            )

    cli.emit(b, as_json, render)


@base_app.command("set-embedding")
def base_set_embedding(
    base: str,
    model: str,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Start it and return.")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Switch the base's model: new vectors from the stored chunks, the old model serves meanwhile.

    The new vectors are built beside the old ones from the stored chunks (no source re-read);
    searches use the old model until the swap.
    """
    with cli.open_kb(home) as kb:
        status = kb.set_embedding_model(base, model)
        if not no_wait and status.get("status") in ("pending", "running"):
            cli.follow(kb, kb.get_base(base).id, [status["job_id"]], quiet=as_json)
            status = kb.model_switch(base) or status
        b = kb.get_base(base)
    out = {"base": b, "switch": status}

    def render() -> None:
        if status.get("status") in ("completed", "swapped"):
            cli.console.print(f"{b.name} now uses {b.embedding_model_id} ({b.dimensions} dims)")
        elif status.get("status") in ("pending", "running"):
            cli.console.print(
                f"switching {b.name} to {model} in the background: {status['job_id']}"
            )
        else:
            why = status.get("error_message") or status.get("status")
            cli.console.print(f"switch of {b.name} to {model} ended {status['status']}: {why}")
            cli.console.print(f"{b.name} still uses {b.embedding_model_id}")

    cli.emit(out, as_json, render)
    if status.get("status") in ("failed", "cancelled"):
        raise typer.Exit(1)


@base_app.command("set")
@setting_options(mutable_only=True)
def base_set(
    base: str, home: HomeOpt = None, as_json: JsonOpt = False, *, settings: dict[str, Any]
) -> None:
    """Change a base's settings (no reindex)."""
    with cli.open_kb(home) as kb:
        b = kb.update_base(base, **settings)
    cli.emit(b, as_json, lambda: cli.console.print(f"updated {b.name}"))


def register(app: typer.Typer) -> None:
    """Add the ``base`` group to ``app``."""
    app.add_typer(base_app, name="base")


def _when(ms: int) -> str:
    """Epoch milliseconds as a UTC date and time a person reads: ``2026-12-07 15:50:26 UTC``."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
