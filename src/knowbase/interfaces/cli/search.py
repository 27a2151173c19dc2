"""``kb search``: cited results, each passage shown as whole sentences.

The stored chunks keep exact offsets and may begin or end inside a sentence (a BM25-only base
chunks at 1,024 tokens); only the display is trimmed, never the chunk (:func:`passage`).
Registered on the main app by ``interfaces/cli/``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import regex
import typer
from rich.markup import escape

from knowbase.interfaces.cli.labels import TagOpt, WhereOpt, split_tags

HomeOpt = Annotated[
    str | None,
    typer.Option("--home", envvar="KNOWBASE_HOME", help="Home directory (env KNOWBASE_HOME)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]

PASSAGE_CHARS = 400
# A sentence ends at . ! ? (or their CJK forms), maybe closed by quotes/brackets, before a space;
# a blank line ends a paragraph.
_SENTENCE_END = regex.compile(r"(?:[.!?](?:[\"')\]]*)(?=\s)|[。！？]|\n\s*\n)")


def passage(text: str, limit: int = PASSAGE_CHARS) -> str:
    """``text`` shown as whole sentences: start at a sentence, stop at a sentence end.

    A chunk that starts inside a sentence begins at its next sentence (when one starts early),
    else with ``…``; the cut falls on the last sentence end within ``limit`` characters, or the
    next one up to twice that, else on a word with ``…``. Whitespace runs become one space.

    >>> passage("ends here. Next one starts. And goes on", 30)
    '… Next one starts.'
    """
    body = text.strip()
    lead = ""
    if body and not _starts_sentence(body):
        first = _SENTENCE_END.search(body, 0, limit // 2)
        if first is not None and body[first.end() :].strip():
            body = body[first.end() :].lstrip()
        lead = "… "
    cut = None
    for m in _SENTENCE_END.finditer(body, 0, min(len(body), 2 * limit)):
        if m.end() <= limit or cut is None:
            cut = m.end()
        if m.end() > limit:
            break
    if len(body) <= limit and (cut is None or _ends_sentence(body)):
        shown, tail = body, ""
    elif cut is not None and cut >= limit // 3:
        shown, tail = body[:cut], ""
    else:
        shown = body[:limit].rsplit(" ", 1)[0] if " " in body[:limit] else body[:limit]
        tail = " …"
    return lead + " ".join(shown.split()) + tail


def _starts_sentence(text: str) -> bool:
    """Upper case, a digit, a caseless letter (CJK), an opening mark or Markdown block start."""
    ch = text[0]
    if ch.isalpha():
        return not ch.islower()
    return ch.isdigit() or ch in "\"'([#*-|>`"


def _ends_sentence(text: str) -> bool:
    return bool(_SENTENCE_END.search(text + " ", max(0, len(text) - 3)))


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
            "document that touch are merged (exact offsets).",
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
    explain: Annotated[bool, typer.Option("--explain", help="Show how the search ran.")] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search a base; prints cited results (Concept ID, locator, score).

    ``--tag`` keeps documents carrying every tag given (a folder's tags count for its files);
    ``--where`` filters on metadata."""
    from knowbase.interfaces import cli

    with cli.open_kb(home) as kb:
        response = kb.search(
            base, query, top_k=top_k, under=under, types=types, since=since,
            tags=split_tags(tag) or None, where=where or None, context=context,
            also=also or (),
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
            console.print(f"   {escape(passage(r.text))}", highlight=False)
        console.print(f"[dim]mode: {response.mode}[/]")
        if explain:
            console.print_json(json.dumps(response.explain, default=str))

    cli.emit(response, as_json, render)


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
