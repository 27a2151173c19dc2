"""What every ``kb`` command shares: the ``--home`` and ``--json`` options, the consoles, opening
the home for one command, and printing JSON or the rich view (as sqlite-utils' output options).

Commands import it as ``from knowbase.interfaces.cli import options as cli`` and call
``cli.open_kb``, ``cli.emit``, ``cli.console``, ``cli.follow``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from knowbase.interfaces.cli.progress import follow as follow  # re-exported: cli.follow

if TYPE_CHECKING:
    from knowbase.service import Knowledge

console = Console()
err_console = Console(stderr=True)

HomeOpt = Annotated[
    str | None,
    typer.Option("--home", envvar="KNOWBASE_HOME", help="Home directory (env KNOWBASE_HOME)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]


@contextmanager
def open_kb(home: str | None, **overrides: Any) -> Iterator[Knowledge]:
    """Open the home's ``Knowledge`` for one command."""
    from knowbase.service import Knowledge
    from knowbase.settings import load_settings

    kb = Knowledge(load_settings(home, **overrides))
    try:
        with kb.acting_as(None, "cli"):  # the jobs a command starts say so (jobs/actor.py)
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


def render_workers(workers: list[dict[str, Any]]) -> None:
    """One line per live worker (every host): id, pid, heartbeat age, jobs held."""
    if not workers:
        return
    table = Table("worker", "host", "pid", "heartbeat", "jobs held", box=None)
    for w in workers:
        age = f"{w['heartbeat_age_s']:.1f} s ago"
        table.add_row(w["id"], w["host"], str(w["pid"]), age, str(w["jobs_held"]))
    console.print(table)
