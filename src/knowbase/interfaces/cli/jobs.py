"""``kb jobs``: the home's jobs, newest first, with who asked for each (key and surface).

Registered on the main app by ``interfaces/cli/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from knowbase.interfaces.cli import options as cli
from knowbase.interfaces.cli.options import HomeOpt, JsonOpt

if TYPE_CHECKING:
    from knowbase.service import Knowledge


WIDE_JOBS = 140  # columns below which kb jobs prints two lines a job instead of a table


def jobs(
    base: Annotated[str | None, typer.Option(help="Only this base.")] = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Include completed jobs.")] = False,
    limit: Annotated[int, typer.Option(min=1, help="Show this many, newest first.")] = 200,
    before: Annotated[
        str | None, typer.Option(help="Page on: only jobs created before this job id.")
    ] = None,
    by: Annotated[
        str | None,
        typer.Option("--by", help="Only jobs this API key asked for (admin: the API token)."),
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List active and failed jobs, newest first: base, what each works on, progress, and
    who asked for it (the API key and surface)."""
    statuses = None if all_jobs else ["pending", "running", "failed"]
    with cli.open_kb(home) as kb:
        found = kb.activity.list_jobs(
            base=base, statuses=statuses, limit=limit, before=before, by_key=by
        )
        names = {b.id: b.name for b in kb.list_bases()}
        subjects = {j.id: _job_subject(kb, j) for j in found}

    def render() -> None:
        if not found:
            what = "jobs" if all_jobs else "active or failed jobs (--all shows finished ones)"
            cli.console.print(f"no {what}")
            return
        rows = []
        for j in found:
            prog = (
                f"{j.progress_stage or ''} {j.progress_percent or 0:.0f}%"
                if j.progress_stage
                else ""
            )
            base_name = names.get(str(j.payload.get("base_id")), "")
            kind = j.kind.removeprefix("knowledge.")
            attempts = f"{j.attempts}/{j.max_attempts}"
            rows.append((j.id, base_name, kind, subjects[j.id], j.status, attempts, prog,
                         j.error_code or "", _who(j)))  # fmt: skip
        if cli.console.width < WIDE_JOBS:
            # Nine columns do not fit: rich cut every one to "ind… run…". Two lines a job.
            for jid, base_name, kind, on, status, attempts, prog, error, who in rows:
                cli.console.print(f"{jid}  {kind}  {status}  {attempts}", highlight=False)
                rest = [f"base {base_name}", f"on {on}" if on else "", prog, error, who]
                cli.console.print("  " + " · ".join(escape(r) for r in rest if r), highlight=False)
            return
        table = Table(
            "id", "base", "kind", "on", "status", "attempts", "progress", "error", "by", box=None
        )
        for row in rows:
            table.add_row(*(escape(c) for c in row))
        table.columns[0].no_wrap = True
        cli.console.print(table)

    cli.emit(found, as_json, render)


def _who(job: Any) -> str:
    """``by KEY via SURFACE`` for a job someone asked for through a key or surface."""
    if not job.by_key and not job.by_surface:
        return ""
    return f"by {job.by_key or '-'} via {job.by_surface or '?'}"


def _job_subject(kb: Knowledge, job: Any) -> str:
    """The file or folder a job works on, else how many items; '' when it names none."""
    from knowbase.errors import KnowbaseError

    p = job.payload
    ids = [p["item_id"]] if p.get("item_id") else list(p.get("item_ids") or [])
    ids = ids or list(p.get("root_item_ids") or [])
    if not ids or not p.get("base_id"):
        return ""
    try:
        first = kb.get_item(p["base_id"], ids[0]).title
    except KnowbaseError:
        first = ids[0]
    return first if len(ids) == 1 else f"{first} +{len(ids) - 1}"


def register(app: typer.Typer) -> None:
    """Add ``jobs`` to ``app``."""
    app.command("jobs")(jobs)
