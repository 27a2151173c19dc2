"""``kb tree``, ``kb read``, ``kb outline``, ``kb rm``, ``kb reindex`` (by Concept ID), ``kb mcp``.

The CLI twins of the agent tools; ``kb mcp`` starts the MCP server (``interfaces/mcp/``).
Registered on the main app by ``interfaces/cli/``. Errors are ``KnowbaseError``s, rendered by
the main app's single error edge. Nothing here imports ``mcp`` until ``kb mcp`` runs.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.markup import escape

from knowbase.interfaces.cli import options as cli
from knowbase.interfaces.cli.options import HomeOpt, JsonOpt

NoWaitOpt = Annotated[bool, typer.Option("--no-wait", help="Return once queued.")]


def _cli() -> Any:
    # Imported late: cli.py imports this module while it is still being initialised.

    return cli


def tree(
    base: str,
    max_depth: Annotated[int | None, typer.Option("--max-depth", min=0, help="Levels.")] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a base's items as a tree, with the Concept ID of each readable document."""
    with cli.open_kb(home) as kb:
        data = kb.concepts.organization_tree(base, max_depth=max_depth)

    def render() -> None:
        if not data["nodes"]:
            cli.console.print("empty base")
        for node in data["nodes"]:
            indent = "  " * node["depth"]
            cid = f"  [cyan]{node['concept_id']}[/]" if node.get("concept_id") else ""
            status = "" if node["status"] == "completed" else f" [yellow]({node['status']})[/]"
            if node.get("failed_files"):  # a folder: its files failed, not the folder
                status = f" [yellow]({node['failed_files']} of {node['files']} files failed)[/]"
            # soft_wrap: a long path stays one line (piped, rich would wrap it mid-path)
            line = f"{indent}{node['title']}{status}{cid}"
            cli.console.print(line, highlight=False, soft_wrap=True)
        if data["truncated"]:
            cli.console.print(f"[dim]… first {len(data['nodes'])} of {data['total_items']}[/]")

    cli.emit(data, as_json, render)


def read(
    base: str,
    concept_id: str,
    char_from: Annotated[int | None, typer.Option("--from", min=0, help="First char.")] = None,
    char_to: Annotated[int | None, typer.Option("--to", min=1, help="End char.")] = None,
    grep: Annotated[str | None, typer.Option("--grep", help="Regex; list matches.")] = None,
    case_sensitive: Annotated[
        bool, typer.Option("--case-sensitive", help="With --grep: match case.")
    ] = False,
    max_matches: Annotated[
        int | None, typer.Option("--max-matches", min=1, max=200, help="With --grep (≤ 200).")
    ] = None,
    section: Annotated[
        str | None,
        typer.Option("--section", help="Read one section: an outline node id or heading path."),
    ] = None,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Continue a section read (its next_cursor).")
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option("--max-tokens", min=1, max=5000, help="Section read budget (1,500)."),
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a document by Concept ID (≤ 20,000 chars per call), one section of it
    (--section, see kb outline), or grep it."""
    with cli.open_kb(home) as kb:
        if section is not None or cursor is not None:
            if grep is not None or char_from is not None or char_to is not None:
                raise typer.BadParameter("--section/--cursor take no --grep, --from or --to")
            data = kb.concepts.read_section(
                base, concept_id, section, cursor=cursor, max_tokens=max_tokens
            )
        elif grep is not None:
            data = kb.concepts.grep_concept(
                base, concept_id, grep, ignore_case=not case_sensitive, max_matches=max_matches
            )
        else:
            data = kb.concepts.read_concept(
                base, concept_id, char_start=char_from, char_end=char_to
            )

    def render_read() -> None:
        sys.stdout.write(data["content"])
        if not data["content"].endswith("\n"):
            sys.stdout.write("\n")
        if data.get("next_cursor"):
            cli.err_console.print(
                f"[dim]section {data['section']['id']} goes on; continue with --cursor "
                f"{data['next_cursor']}[/]",
                highlight=False,
            )
        elif data["truncated"]:
            cli.err_console.print(
                f"[dim]truncated: chars {data['char_start']}–{data['char_end']} of "
                f"{data['total_chars']}; continue with --from {data['char_end']}[/]"
            )

    def render_grep() -> None:
        for m in data["matches"]:
            sys.stdout.write(f"{m['line']}:{m['char_start']}: {m['snippet']}\n")
        shown = len(data["matches"])
        if data["total_matches"] > shown or data["partial"]:
            more = f" (stopped early: {data.get('reason', '')})" if data["partial"] else ""
            cli.err_console.print(f"[dim]{shown} of {data['total_matches']} matches{more}[/]")

    cli.emit(data, as_json, render_grep if grep is not None else render_read)


def outline(
    base: str,
    concept_id: str,
    depth: Annotated[
        int | None, typer.Option("--depth", min=1, help="Levels shown (1: the top level).")
    ] = None,
    under: Annotated[
        str | None, typer.Option("--under", help="Only this section (node id or heading path).")
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a document's outline: its sections (headings, slides, sheets, pages…) with ids,
    tokens, tables and figures; read one with kb read --section ID."""
    with cli.open_kb(home) as kb:
        data = kb.concepts.outline(base, concept_id, depth=depth, under=under)

    def render() -> None:
        for node in data["nodes"]:
            indent = "  " * node["depth"]
            where = _where(node["locator"])
            line = f"{indent}[cyan]{node['id']}[/] {escape(node['title'])}  [dim]{where}"
            cli.console.print(f"{line}{node['tokens']} tokens[/]", highlight=False, soft_wrap=True)
            for kind in ("tables", "figures"):
                for part in node.get(kind, []):
                    label = escape(part["label"])
                    cli.console.print(f"{indent}  [dim]{kind[:-1]}: {label}[/]", highlight=False)
        if data["truncated"]:
            shown, total = len(data["nodes"]), data["total_nodes"]
            cli.console.print(f"[dim]… {shown} of {total} sections shown[/]")

    cli.emit(data, as_json, render)


def _where(locator: dict[str, Any]) -> str:
    """``page 3 · `` / ``slide 2 · `` / ``sheet Q1 · `` for a node's line ('' for headings)."""
    for key in ("page", "slide", "sheet", "chapter"):
        if key in locator:
            return f"{key} {escape(str(locator[key]))} · "
    return ""


def rm(
    base: str,
    concept_ids: Annotated[
        list[str],
        typer.Argument(
            help="Concept IDs to delete; a folder's Concept ID prefix (see kb tree), an item "
            "id, URL or path also works."
        ),
    ],
    no_wait: NoWaitOpt = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete documents or folders by Concept ID, folder path, item id or URL; exit 1 when a
    name matches nothing (the others are still deleted)."""
    _batch("delete", base, concept_ids, no_wait, home, as_json)


def reindex(
    base: str,
    concept_ids: Annotated[list[str], typer.Argument(help="Concept IDs to rebuild.")],
    no_wait: NoWaitOpt = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-read and re-index documents by Concept ID (one batch, re-acquired from the origin)."""
    _batch("refresh", base, concept_ids, no_wait, home, as_json)


def _batch(
    action: str, base: str, concept_ids: list[str], no_wait: bool, home: str | None, as_json: bool
) -> None:
    with cli.open_kb(home) as kb:
        b = kb.get_base(base)
        if action == "delete":
            data = kb.delete_refs(b.id, concept_ids)
        else:
            data = kb.concepts.refresh_concepts(b.id, concept_ids)
        if data["job_id"] and not no_wait:
            cli.follow(kb, b.id, [data["job_id"]], quiet=as_json)

    def render() -> None:
        verb = "deleted" if action == "delete" else "reindexed"
        for cid in data["applied"]:
            cli.console.print(f"{verb} {cid}", highlight=False)
        for cid in data["not_found"]:
            cli.err_console.print(f"[yellow]not found[/]: {cid}", highlight=False)

    cli.emit(data, as_json, render)
    if data["not_found"]:
        raise typer.Exit(1)  # a name that matched nothing; the names that matched are applied


def mcp(
    base: Annotated[
        list[str] | None,
        typer.Option("--base", help="A base the server may see (repeat); default: every base."),
    ] = None,
    allow_writes: Annotated[
        bool,
        typer.Option(
            "--allow-writes",
            help="Let kb_manage write without asking when the client cannot ask (no MCP "
            "elicitation).",
        ),
    ] = False,
    http: Annotated[bool, typer.Option("--http", help="Streamable HTTP instead of stdio.")] = False,
    host: Annotated[str, typer.Option(help="HTTP host (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port.")] = 8765,
    no_workers: Annotated[
        bool, typer.Option("--no-workers", help="Do not run job workers in this process.")
    ] = False,
    allow_path: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-path",
            help="A folder kb_manage may add local files from (repeat), as kb serve "
            "--allow-path. With --allow-writes and none given, local-file adds are refused.",
        ),
    ] = None,
    home: HomeOpt = None,
) -> None:
    """Run the MCP server (kb_list, kb_tree, kb_search, kb_read, kb_grep, kb_manage) over stdio or
    HTTP."""
    from knowbase.interfaces.mcp.run import serve

    serve(
        home=home,
        bases=base or None,
        allow_writes=allow_writes,
        http=http,
        host=host,
        port=port,
        workers=not no_workers,
        allow_path=allow_path,
    )


def register(app: typer.Typer) -> None:
    """Add ``tree``, ``read``, ``rm``, ``reindex`` and ``mcp`` to ``app``."""
    app.command("tree")(tree)
    app.command("read")(read)
    app.command("outline")(outline)
    app.command("rm")(rm)
    app.command("reindex")(reindex)
    app.command("mcp")(mcp)
