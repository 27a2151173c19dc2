"""``kb search``: cited results, each shown by its snippet: the best-matching lines, matched
words marked, a table row under its header (``search/snippet.py`` chooses them; this only
prints). ``--full`` and ``--context`` print whole passages. Registered on the main app by
``interfaces/cli/``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape

from knowbase import mark_spans, passage
from knowbase.interfaces.cli import options as cli
from knowbase.interfaces.cli.labels import TagOpt, WhereOpt, split_tags
from knowbase.interfaces.cli.options import HomeOpt, JsonOpt

__all__ = ["passage", "register"]  # passage: the sentence trim, now in search/snippet.py


MARK = "bold yellow"  # a matched word


def marked(text: str, marks: list[list[int]] | None) -> str:
    """``text`` as rich markup, the ``marks`` spans styled :data:`MARK` and the rest escaped."""
    out, pos = [], 0
    for s, e in marks or []:
        out.append(escape(text[pos:s]) + f"[{MARK}]" + escape(text[s:e]) + "[/]")
        pos = e
    return "".join(out) + escape(text[pos:])


def _print_passage(console: Any, r: Any, query: str, whole: bool) -> None:
    """The hit's snippet (:mod:`knowbase.search.snippet`): a matched table row under its
    header, ``…`` where the passage goes on; ``whole`` prints all of it, words still marked."""
    snip = r.snippet or {}
    if whole:
        lines = marked(r.text.strip("\n"), mark_spans(r.text.strip("\n"), query))
    else:
        lines = marked(snip.get("text", ""), snip.get("marks"))
        if snip.get("before"):
            lines = "… " + lines
        if snip.get("header"):
            lines = f"[dim]{escape(snip['header'])}[/]\n" + lines
        if snip.get("after"):
            lines += " …"
    for line in lines.split("\n"):
        console.print("   " + line, highlight=False)


def search(
    base: str,
    query: str,
    top_k: Annotated[
        int | None,
        typer.Option("--top-k", "-k", metavar="N", help="How many results (default: the base's)."),
    ] = None,
    under: Annotated[
        str | None,
        typer.Option(
            "--under",
            metavar="PATH",
            help="Only documents in this folder: a Concept ID prefix, which starts with the "
            "added folder's name (see kb tree).",
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
    tag: TagOpt = None,
    where: WhereOpt = None,
    context: Annotated[
        int | None,
        typer.Option(
            "--context",
            metavar="TOKENS",
            help="Return each hit with its neighbouring chunks, within TOKENS; hits of one "
            "document that touch are merged (exact offsets). Printed whole.",
        ),
    ] = None,
    also: Annotated[
        list[str] | None,
        typer.Option(
            "--also",
            metavar="QUERY",
            help="Another phrasing of the same question (repeat, up to 4): each is searched "
            "and the lists fuse; passages several phrasings find come first.",
        ),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            metavar="passage|document",
            help="document: one result per document, scored by its best passage, its best "
            "passages listed as citations (default: passage).",
        ),
    ] = None,
    full: Annotated[
        bool,
        typer.Option("--full", help="Print each passage whole, not its best-matching lines."),
    ] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Show how the search ran.")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search a base; prints cited results (Concept ID, locator, score).

    --tag keeps documents carrying every tag given (a folder's tags count for its files);
    --where filters on metadata."""

    with cli.open_kb(home) as kb:
        response = kb.search(
            base,
            query,
            top_k=top_k,
            under=under,
            types=types,
            since=since,
            tags=split_tags(tag) or None,
            where=where or None,
            context=context,
            also=also or (),
            group=group,
        )
        prefixes = _folder_prefixes(kb, base) if under and not response.results else []

    def render() -> None:
        console = cli.console
        if not response.results:
            console.print("no results")
            inside = any(under.strip("/").startswith(p + "/") or under == p for p in prefixes)
            if under and not inside:
                hint = ", ".join(f"{p}/" for p in prefixes[:8]) or "none"
                example = (prefixes[0] if prefixes else "FOLDER") + "/" + under.strip("/")
                console.print(
                    f"[dim]hint: --under matches the start of a Concept ID, which begins with "
                    f"the added folder's name (here: {escape(hint)}); e.g. --under "
                    f"{escape(example)}. kb tree {escape(base)} lists them.[/]",
                    highlight=False,
                )
        for r in response.results:
            where = r.concept_id or r.title or r.item_id
            loc = ", ".join(
                f"{k} {' › '.join(map(str, v)) if isinstance(v, list) else v}"
                for k, v in (r.locator or {}).items()
            )
            cite = f"{where}" + (f" ({loc})" if loc else "") + f" [{r.char_start}:{r.char_end}]"
            console.print(
                f"[bold]{r.rank}.[/] [cyan]{escape(cite)}[/]  {r.score_kind} {r.score:.4f}"
            )
            _print_passage(console, r, query, whole=full or bool(context))
            for c in (r.citations or [])[1:]:  # the first is the passage printed above
                console.print(
                    f"   [dim]also [{c['char_start']}:{c['char_end']}] {c['score']:.4f}[/]"
                )
        console.print(f"[dim]mode: {response.mode}[/]")
        lane = response.explain.get("dense_lane") or {}
        if lane.get("reason") == "query_script_not_covered":
            console.print(
                f"[dim]keyword-only: {escape(str(lane.get('detail', '')))}; the model cannot "
                "place this query among the documents. Use the words the documents would use, "
                "or a model that reads this language (kb base set-embedding).[/]",
                highlight=False,
            )
        if explain:
            console.print_json(json.dumps(response.explain, default=str))

    _warn_unknown_keys(cli, base, response.explain.get("filters") or {})
    cli.emit(response, as_json, render)


def _warn_unknown_keys(cli: Any, base: str, filters: dict[str, Any]) -> None:
    """On stderr: ``--where`` keys that no item of the base has (a typo matches nothing)."""
    unknown = filters.get("unknown_keys")
    if unknown:
        known = ", ".join(filters.get("known_keys") or []) or "none: no item has metadata"
        cli.err_console.print(
            f"[yellow]warning:[/] no item of {escape(base)} has the metadata key "
            f"{escape(', '.join(unknown))}; the keys its items have: {escape(known)}",
            highlight=False,
            soft_wrap=True,
        )


def _folder_prefixes(kb: Any, base: str) -> list[str]:
    roots = kb.list_items(base, roots_only=True)
    return [
        (r.relative_path or "").rstrip("/")
        for r in roots
        if r.type in ("directory", "sitemap") and r.relative_path
    ]


def register(app: typer.Typer) -> None:
    """Add ``search`` to ``app``."""
    app.command("search")(search)
