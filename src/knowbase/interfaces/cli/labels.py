"""``kb label``: change an item's tags and metadata; and the ``--tag`` / ``--meta`` / ``--where``
options ``kb add`` and ``kb search`` share.

``--meta key=value`` reads the value as a number when it is one (``year=2024``), else as text;
``--where`` takes ``key=value``, ``key!=value``, ``key>=value``, ``key<=value``, ``key>value``,
``key<value`` or ``'key in a,b'`` (``knowbase.search.label_filters``).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from knowbase.errors import InvalidInput
from knowbase.interfaces.cli import options as cli

TagOpt = Annotated[
    list[str] | None,
    typer.Option("--tag", metavar="TAG", help="A tag (repeat it or give a comma list)."),
]
MetaOpt = Annotated[
    list[str] | None,
    typer.Option("--meta", metavar="KEY=VALUE", help="A metadata entry (repeatable)."),
]
WhereOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--where",
        metavar="COND",
        help="Only documents whose metadata satisfies COND: key=value, key!=value, key>=value, "
        "key<value…, or 'key in a,b' (repeatable: all must hold).",
    ),
]


def split_tags(values: list[str] | None) -> list[str]:
    return [t.strip() for v in values or [] for t in v.split(",") if t.strip()]


def parse_meta(values: list[str] | None) -> dict[str, Any]:
    """``["year=2024", "team=infra"]`` → ``{"year": 2024, "team": "infra"}``."""
    out: dict[str, Any] = {}
    for value in values or []:
        key, sep, raw = value.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(f"--meta takes KEY=VALUE, not {value!r}", value=value)
        out[key.strip()] = _scalar(raw.strip())
    return out


def _scalar(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def label(
    base: str,
    item: Annotated[str, typer.Argument(help="An item id, a Concept ID or a folder path.")],
    add: TagOpt = None,
    remove: Annotated[
        list[str] | None, typer.Option("--remove", metavar="TAG", help="Remove a tag.")
    ] = None,
    meta: MetaOpt = None,
    unset: Annotated[
        list[str] | None, typer.Option("--unset", metavar="KEY", help="Remove a metadata key.")
    ] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Start from no tags and no metadata.")
    ] = False,
    home: Annotated[
        str | None,
        typer.Option("--home", envvar="KNOWBASE_HOME", help="Home directory (env KNOWBASE_HOME)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Show or change an item's tags and metadata (a folder's apply to everything under it).

    No reindex: the next search sees the change. Without options it shows the labels."""

    merge = {**parse_meta(meta), **{k: None for k in unset or []}}
    with cli.open_kb(home) as kb:
        changed = kb.set_labels(
            base,
            item,
            tags=[] if clear else None,
            metadata={} if clear else None,
            add_tags=split_tags(add),
            remove_tags=split_tags(remove),
            merge_metadata=merge or None,
        )
        inherited = kb.label_sources(base, changed.id)[1:]
    data = {
        "item_id": changed.id,
        "tags": changed.tags,
        "metadata": changed.metadata,
        "inherited": inherited,  # the folders above it with labels, nearest first
    }

    def render() -> None:
        cli.console.print(
            f"{changed.title}: {_labels_text(changed.tags, changed.metadata)}", highlight=False
        )
        for source in inherited:
            cli.console.print(
                f"  from {source['path']}: {_labels_text(source['tags'], source['metadata'])}",
                highlight=False,
            )

    cli.emit(data, as_json, render)


def _labels_text(tags: list[str], metadata: dict[str, Any]) -> str:
    pairs = ", ".join(f"{k}={v}" for k, v in metadata.items()) or "none"
    return f"tags {', '.join(tags) or 'none'}; metadata {pairs}"


def register(app: typer.Typer) -> None:
    app.command("label")(label)
