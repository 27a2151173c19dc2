"""``kb add``, ``kb status``, ``kb retry``: putting items in and seeing how it went (``kb jobs``:
``cli/jobs.py``).

Registered on the main app by ``interfaces/cli/`` (imported late: run as ``python -m``,
cli.py is ``__main__`` and a module-level import of it would re-import it half-built).

Exit codes of ``kb add`` (README "Exit codes"): 0 every item indexed (or still queued with
``--no-wait``), 1 an error refused the command, 2 a usage error, 3 ``--conflict detect`` found
conflicts (nothing added), 4 the add ran but some items failed (the summary names them).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from knowbase import DEFAULT_STRATEGY, ConflictStrategy
from knowbase.interfaces.cli import options as cli
from knowbase.interfaces.cli.labels import MetaOpt, TagOpt, parse_meta, split_tags
from knowbase.interfaces.cli.options import HomeOpt, JsonOpt
from knowbase.interfaces.cli.progress import say_cost, summarize

if TYPE_CHECKING:
    from knowbase import AddInput, Base
    from knowbase.service import Knowledge

NoWaitOpt = Annotated[bool, typer.Option("--no-wait", help="Return once queued.")]

EXIT_CONFLICTS = 3
EXIT_ITEMS_FAILED = 4
FAILED_SHOWN = 20


def _inputs_for(targets: list[str], note: str | None, title: str | None) -> list[AddInput]:
    from knowbase import AddInput

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


def add(
    base: str,
    targets: Annotated[list[str] | None, typer.Argument(help="Files, folders or URLs.")] = None,
    note: Annotated[
        str | None, typer.Option(help="Add a note with this text ('-': stdin).")
    ] = None,
    title: Annotated[str | None, typer.Option(help="Title of the note.")] = None,
    conflict: Annotated[
        ConflictStrategy,
        typer.Option(
            metavar="STRATEGY",
            help="When a source is already in the base. update: re-adding the same path or URL "
            "updates it (a sync; only changed files are reindexed); rename: add a copy "
            "(DIR_1); detect: add nothing and list the clashes (exit 3); replace: delete the "
            "old one first.",
        ),
    ] = DEFAULT_STRATEGY,
    tag: TagOpt = None,
    meta: MetaOpt = None,
    as_text: Annotated[
        list[str] | None,
        typer.Option(
            "--as-text",
            metavar="GLOB",
            help="Read files whose name (or path below a folder) matches GLOB as plain text, "
            "whatever they hold (repeatable; e.g. --as-text '*.log'). Text files of any name "
            "are read as text anyway; this is for files that do not look like it.",
        ),
    ] = None,
    no_wait: NoWaitOpt = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add files, folders, web pages or a note, index them, and count what was indexed.

    --tag and --meta label every item added (a folder's labels apply to its files;
    re-adding adds them to the item it updates); search filters on them (--tag, --where).

    The summary gives files indexed, skipped (by reason) and failed (named); exit code 4 when
    any item failed.
    """
    inputs = _inputs_for(targets or [], note, title)
    if tag or meta:
        labels = (split_tags(tag), parse_meta(meta))
        inputs = [i.with_labels(*labels) for i in inputs]
    if as_text:
        inputs = [i.with_as_text(as_text) for i in inputs]
    if not inputs:
        raise typer.BadParameter("give at least one file, folder or URL, or --note")
    with cli.open_kb(home) as kb:
        b = kb.get_base(base)
        _warn_model_cannot_read(kb, b, targets or [])
        result = kb.add(b.id, inputs, strategy=conflict)
        if result.status == "conflicts":
            cli.emit(result, as_json, lambda: _render_conflicts(result))
            raise typer.Exit(EXIT_CONFLICTS)
        roots = [i.id for i in result.items] + [i.id for i in result.updated]
        rate = None if as_json else say_cost(kb, b, result.items)
        if not no_wait:
            cli.follow(kb, b.id, result.job_ids, quiet=as_json, root_ids=roots, rate=rate)
        tree = kb.subtree(b.id, roots)
    by_id = {i.id: i for i in tree}
    items = [by_id[i.id] for i in result.items if i.id in by_id]
    updated = [by_id[i.id] for i in result.updated if i.id in by_id]
    summary = summarize(tree)
    data = {
        "status": result.status,
        "items": items,
        "updated": updated,
        "update": result.update_report,
        "job_ids": result.job_ids,
        "summary": summary.to_dict(),
    }

    def render() -> None:
        _print_added(items, updated, result.update_report, summary, b.name)

    cli.emit(data, as_json, render)
    if summary.failed and not no_wait:
        raise typer.Exit(EXIT_ITEMS_FAILED)


def _print_added(
    items: list[Any], updated: list[Any], found: dict[str, int], summary: Any, base: str
) -> None:
    """What ``kb add`` did: each item added or updated, the update's counts, the files'
    outcome, and each file skipped or failed by name."""
    console = cli.console
    for item in items:
        cid = _concept_prefix(item)
        console.print(f"added {escape(item.title)}" + (f" → {cid}" if cid else ""))
    for item in updated:
        console.print(f"updated {escape(item.title)} (already in the base)", highlight=False)
    if found:
        refetched = f", {found['refetched']} read again from the origin"
        resumed = f", {found.get('resumed')} interrupted add(s) resumed"
        console.print(
            f"update: {found['changed']} changed, {found['new']} new, "
            f"{found['vanished']} vanished (kept; kb sync --prune removes them), "
            f"{found['unchanged']} unchanged"
            + (refetched if found["refetched"] else "")
            + (resumed if found.get("resumed") else ""),
            highlight=False,
        )
    parts = [f"{summary.indexed} indexed"]
    if summary.active:
        parts.append(f"{summary.active} still processing (kb status {base})")
    skipped = sum(summary.skipped.values())
    if skipped:
        why = ", ".join(f"{r} {n}" for r, n in sorted(summary.skipped.items()))
        parts.append(f"{skipped} skipped ({why})")
    parts.append(f"{len(summary.failed)} failed")
    # After an update the counts are the files' state, not work done now: say so (a re-add
    # of 127 unchanged files said "127 indexed").
    head = "files now" if updated and not items else "files"
    console.print(f"{head}: " + ", ".join(parts), highlight=False)
    _print_skipped_and_failed(summary, base)


def _print_skipped_and_failed(summary: Any, base: str) -> None:
    console = cli.console
    for name in summary.undecodable[:FAILED_SHOWN]:
        console.print(
            f"  [yellow]skipped[/] {escape(name)}: undecodable_name — the name is not "
            "UTF-8 (its bytes escaped here); rename the file to add it",
            highlight=False,
        )
    shown = len(summary.undecodable[:FAILED_SHOWN])
    unnamed = summary.skipped.get("undecodable_name", 0) - shown
    if summary.undecodable and unnamed > 0:
        console.print(f"  … and {unnamed} more such names", highlight=False)
    for reason, paths in sorted(summary.skipped_files.items()):
        if reason == "undecodable_name":
            continue  # named above, bytes escaped
        for path in paths:  # every one, so nobody has to guess what "…" hid (issue 41)
            console.print(f"  skipped {reason}: {escape(path)}", highlight=False)
        unnamed = summary.skipped.get(reason, 0) - len(paths)
        if unnamed > 0:
            console.print(f"  skipped {reason}: {unnamed} more not named", highlight=False)
    for f in summary.failed[:FAILED_SHOWN]:
        console.print(
            f"  [red]failed[/] {escape(str(f['source']))}: {f['code']} — "
            f"{escape(str(f['message']))}",
            highlight=False,
        )
    if len(summary.failed) > FAILED_SHOWN:
        console.print(f"  … and {len(summary.failed) - FAILED_SHOWN} more: kb status {base}")


def _concept_prefix(item: Any) -> str:
    """The Concept ID (a file) or the prefix every Concept ID under a folder starts with."""
    rel = item.relative_path
    if item.type == "directory" and rel:
        return f"{rel.rstrip('/')}/…"
    return item.concept_id or ""


def _warn_model_cannot_read(kb: Knowledge, b: Base, targets: list[str]) -> None:
    """On stderr: suggest a multilingual model when the files are mostly CJK (never applied)."""
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    hint = kb.model_hint(b, local)
    if hint:
        cli.err_console.print(f"[yellow]hint:[/] {escape(hint)}", soft_wrap=True)


def _render_conflicts(result: Any) -> None:
    console = cli.console
    console.print("[yellow]conflicts — nothing was added:[/]")
    for c in result.conflicts:
        console.print(f"  {c.type}: {c.title}")


def base_state(base: Base, counts: dict[str, int]) -> str:
    """What a newcomer needs from a base's state: empty, processing, failures, or ready."""
    if base.status != "completed":
        return f"{base.status}: {base.error}" if base.error else base.status
    total = sum(counts.values())
    if not total:
        return "empty"
    active = total - counts.get("completed", 0) - counts.get("failed", 0)
    if active:
        return f"processing, {active} files to go"
    if counts.get("failed"):
        return f"ready, {counts['failed']} failed"
    return "ready"


def status(
    base: Annotated[str | None, typer.Argument(help="A base; without it: readiness.")] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Items by status with errors and item ids (for a base), or readiness of every part."""
    with cli.open_kb(home) as kb:
        if base is None:
            from knowbase.service.readiness import readiness

            report = readiness(kb)
            live = next((c for c in report["components"] if c["component"] == "workers"), None)
            cli.emit(report, as_json, lambda: _render_readiness(report, live))
            if report["status"] == "unavailable":
                raise typer.Exit(1)
            return
        b = kb.get_base(base)
        counts = kb.counts(b.id)
        # A folder that failed only through its files (child_failed) is not listed: its files are.
        failed = [
            i
            for i in kb.list_items(b.id, statuses=["failed"])
            if not (i.is_container and i.error_code == "child_failed")
        ]
        queued = kb.activity.count_jobs(base=b.id, statuses=["pending", "running"])
        workers = kb.activity.list_workers()
        skipped = {i.title: i.data["skipped"] for i in kb.list_items(b.id) if i.data.get("skipped")}
        from knowbase.service.readiness import base_vector_lane, lane_line

        lane = base_vector_lane(kb, b)
    data = {
        "base": b,
        "state": base_state(b, counts),
        "counts": counts,
        "failed": failed,
        "active_jobs": queued,
        "live_workers": len(workers),
        "workers": workers,
        "skipped": skipped,
        "vector_lane": lane,
    }

    def render() -> None:
        console = cli.console
        console.print(
            f"[bold]{escape(b.name)}[/] ({base_state(b, counts)}) — "
            + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no items")
        )
        if lane and lane.get("lane") != "none":
            console.print(lane_line(lane))
        if queued:
            note = "" if workers else " — queued, no worker running (run: kb worker)"
            console.print(f"{queued} active jobs{note}")
        if failed:
            table = Table("failed item", "id", "error", box=None)
            for item in failed:
                hint = f" — {item.error_message}" if item.error_message != item.error_code else ""
                table.add_row(
                    escape(item.origin or item.title), item.id, f"{item.error_code}{hint}"
                )
            console.print(table)
            console.print(f"[dim]remove one: kb rm {b.name} ID; re-run them: kb retry {b.name}[/]")
        for folder, report in skipped.items():
            parts = ", ".join(f"{r}: {v['count']}" for r, v in report.items())
            console.print(f"  skipped in {escape(folder)}: {parts}")
        cli.render_workers([w.to_dict() for w in workers])

    cli.emit(data, as_json, render)


def _render_readiness(report: dict[str, Any], live: dict[str, Any] | None) -> None:
    colour = {"ready": "green", "degraded": "yellow"}
    cli.console.print(f"home: [bold]{report['status']}[/]")
    table = Table("component", "base", "status", "detail", box=None)
    for c in report["components"]:
        st = c["status"]
        table.add_row(
            c["component"],
            escape(c.get("base_name") or ""),
            f"[{colour.get(st, 'red')}]{st}[/]",
            escape(c["reason"]),
        )
    cli.console.print(table)
    if live:
        cli.render_workers(live["details"].get("workers", []))


def retry(
    base: str,
    no_wait: NoWaitOpt = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-run the failed items of a base (rebuilt from the stored copies)."""
    with cli.open_kb(home) as kb:
        b = kb.get_base(base)
        job_id = kb.retry_failed(b.id)
        if job_id and not no_wait:
            cli.follow(kb, b.id, [job_id], quiet=as_json)
        counts = kb.counts(b.id)
        failed = kb.list_items(b.id, statuses=["failed"])
        blocked = kb.retry_blockers(b.id, failed)
    summary = summarize([i for i in failed if i.id not in blocked] if job_id else [])
    titles = {i.id: i.origin or i.title for i in failed}

    def render() -> None:
        if job_id is None:
            cli.console.print("nothing to retry" if not blocked else "nothing a retry can fix:")
        for item_id, why in blocked.items():
            cli.console.print(f"  {escape(titles[item_id])}: {why}", highlight=False)
        if job_id is None:
            return
        cli.console.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
        for f in summary.failed[:FAILED_SHOWN]:
            cli.console.print(
                f"  [red]still failed[/] {escape(str(f['source']))}: {f['code']}", highlight=False
            )

    data = {"job_id": job_id, "counts": counts, "failed": summary.failed, "not_retried": blocked}
    cli.emit(data, as_json, render)


def register(app: typer.Typer) -> None:
    """Add ``add``, ``status`` and ``retry`` to ``app``."""
    app.command("add")(add)
    app.command("status")(status)
    app.command("retry")(retry)
