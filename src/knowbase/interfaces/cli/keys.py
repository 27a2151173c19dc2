"""``kb keys …``: create, list and revoke scoped API keys for ``kb serve`` and ``kb mcp --http``.

A key is shown once, when it is created; the catalog keeps only its SHA-256. A key reads
(``--read-only``) or also changes (``--write``: add, delete, reindex, settings) the bases it
names (``--bases``; none: every base), until ``--expires`` or ``kb keys revoke``. Creating and
deleting bases stays with ``KNOWBASE_API_TOKEN``, the admin key. Servers check keys on every
request: a revoke counts at once, without a restart. Scope rules: ``interfaces/access.py``.

Registered on the main app by ``interfaces/cli/``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from knowbase.errors import InvalidInput
from knowbase.interfaces.cli import options as cli
from knowbase.interfaces.cli.options import HomeOpt, JsonOpt

keys_app = typer.Typer(
    no_args_is_help=True, help="Create, list and revoke scoped API keys (kb serve, kb mcp --http)."
)


def parse_expiry(text: str) -> int:
    """When a key stops working: ``2027-01-31`` (that day's start, UTC) or an ISO date-time
    (UTC unless it says) → epoch milliseconds.

    >>> parse_expiry("2027-01-31") == parse_expiry("2027-01-31T00:00:00Z")
    True
    """
    raw = text.strip()
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"--expires takes a date (2027-01-31) or an ISO date-time, not {text!r}", value=text
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def _when(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


@keys_app.command("create")
def keys_create(
    name: Annotated[str, typer.Argument(help="The key's name: jobs it starts name it.")],
    bases: Annotated[
        str | None,
        typer.Option(help="Comma-separated bases (names or ids) it may see; default: every base."),
    ] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="List, search and read only.")
    ] = False,
    write: Annotated[
        bool,
        typer.Option("--write", help="Also add, delete, reindex, sync and change settings."),
    ] = False,
    expires: Annotated[
        str | None,
        typer.Option(
            help="When it stops working: a date (2027-01-31: at 00:00 UTC) or an ISO date-time."
        ),
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a key and print its token: the only time it is shown (only a hash is kept)."""
    if read_only == write:
        raise InvalidInput("say what the key may do: --read-only or --write (one of them)")
    names = None if bases is None else [b.strip() for b in bases.split(",") if b.strip()]
    if names is not None and not names:
        raise InvalidInput("--bases names no base")
    expires_at = None if expires is None else parse_expiry(expires)
    with cli.open_kb(home) as kb:
        key, token = kb.create_key(name, write=write, bases=names, expires_at_ms=expires_at)
        base_names = _base_names(kb, key.base_ids)
    data = {**key.to_dict(), "bases": base_names, "token": token}

    def render() -> None:
        where = ", ".join(base_names) if base_names is not None else "every base"
        cli.console.print(
            f"created key [bold]{escape(name)}[/]: {key.access} on {escape(where)}"
            + (f", until {_when(key.expires_at)}" if key.expires_at else ""),
            highlight=False,
        )
        cli.console.print("token (shown once; send it as Authorization: Bearer <token>):")
        print(token)

    cli.emit(data, as_json, render)


@keys_app.command("list")
def keys_list(home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Every key with its access, bases, expiry and state (never a token)."""
    with cli.open_kb(home) as kb:
        found = kb.list_keys()
        states = {k.name: kb.key_state(k) for k in found}
        names = {k.name: _base_names(kb, k.base_ids) for k in found}
    data = [{**k.to_dict(), "state": states[k.name], "bases": names[k.name]} for k in found]

    def render() -> None:
        if not found:
            cli.console.print("no keys (kb keys create NAME --read-only|--write)")
            return
        table = Table("name", "access", "bases", "state", "created", "expires", box=None)
        for k in found:
            where = "every base" if names[k.name] is None else ", ".join(names[k.name] or [])
            table.add_row(
                escape(k.name),
                k.access,
                escape(where),
                states[k.name],
                _when(k.created_at),
                _when(k.expires_at),
            )
        cli.console.print(table)

    cli.emit(data, as_json, render)


@keys_app.command("revoke")
def keys_revoke(name: str, home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Revoke a key: servers refuse it from their next request on. Its name stays (jobs keep
    naming it) and is never given to another key."""
    with cli.open_kb(home) as kb:
        key = kb.revoke_key(name)
    cli.emit(
        key.to_dict(),
        as_json,
        lambda: cli.console.print(f"revoked key {escape(name)}", highlight=False),
    )


def _base_names(kb: Any, base_ids: tuple[str, ...] | None) -> list[str] | None:
    """The bases' names now (an id whose base was deleted shows as the id)."""
    if base_ids is None:
        return None
    names = {b.id: b.name for b in kb.list_bases()}
    return [names.get(i, i) for i in base_ids]


def register(app: typer.Typer) -> None:
    """Add the ``keys`` group to ``app``."""
    app.add_typer(keys_app, name="keys")
