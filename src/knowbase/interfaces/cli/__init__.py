"""``kb``: the command line. Each command opens ``Knowledge``, calls one method, renders.

Errors are turned into ``code: message`` (+ hint) in one place, :func:`main`. ``--json`` prints
machine-readable output on stdout. Exit codes: 0 ok, 1 error, 3 detect-strategy conflicts.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import typer

from knowbase.errors import KnowbaseError
from knowbase.interfaces.cli.options import (  # re-exported: the commands' shared pieces
    HomeOpt as HomeOpt,
)
from knowbase.interfaces.cli.options import JsonOpt as JsonOpt
from knowbase.interfaces.cli.options import console as console
from knowbase.interfaces.cli.options import emit as emit
from knowbase.interfaces.cli.options import err_console as err_console
from knowbase.interfaces.cli.options import open_kb as open_kb
from knowbase.interfaces.cli.options import render_workers as render_workers
from knowbase.interfaces.cli.options import to_jsonable as to_jsonable
from knowbase.interfaces.cli.progress import follow as follow  # re-exported: cli.follow


class _Group(typer.core.TyperGroup):
    """The root group: a flag shows no ``<bool>`` type in ``--help`` (typer 0.29 adds one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _hide_flag_types(self)

    def list_commands(self, ctx: Any) -> list[str]:
        """A newcomer's order: make a base, fill it, search it, see how it went; then the rest."""
        names = super().list_commands(ctx)
        first = [n for n in FIRST_COMMANDS if n in names]
        return first + [n for n in names if n not in first]


FIRST_COMMANDS = ("base", "add", "search", "status", "jobs", "retry", "rm", "tree", "read", "sync")


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

    from knowbase.interfaces.cli.serve import watching
    from knowbase.interfaces.logs import configure

    configure("warning")  # timestamped lines, repeats collapsed, as kb serve's (issue 37)
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
        "knowbase.interfaces.cli.bases",
        "knowbase.interfaces.cli.items",
        "knowbase.interfaces.cli.jobs",
        "knowbase.interfaces.cli.search",
        "knowbase.interfaces.cli.concepts",
        "knowbase.interfaces.cli.serve",
        "knowbase.interfaces.cli.sync",
        "knowbase.interfaces.cli.eval",
        "knowbase.interfaces.cli.portable",
        "knowbase.interfaces.cli.labels",
        "knowbase.interfaces.cli.formats",
        "knowbase.interfaces.cli.keys",
    ):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(app)


_register_plugins()


def _library_error(exc: Exception) -> KnowbaseError | None:
    """An OSError or a database driver's error that reached the edge, as a coded error."""
    from knowbase.errors import FileSystemError, Unavailable

    if isinstance(exc, RuntimeError) and isinstance(exc.__context__, OSError):
        exc = exc.__context__  # pathlib's "Symlink loop" wraps the ELOOP OSError
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return FileSystemError(
            f"{exc.strerror or exc}{where}",
            hint="check the path, its permissions and free disk space",
            path=str(exc.filename) if exc.filename else None,
            errno=exc.errno,
        )
    if type(exc).__module__.split(".")[0] in ("sqlalchemy", "sqlite3", "apsw", "psycopg"):
        return Unavailable(
            f"database error ({type(exc).__name__}): {exc}".splitlines()[0],
            hint="kb status says which component is unavailable and why",
        )
    return None


def _print_error(exc: KnowbaseError) -> None:
    if "--json" in sys.argv:
        sys.stdout.write(json.dumps(to_jsonable(exc.to_dict()), ensure_ascii=False) + "\n")
    from rich.markup import escape

    err_console.print(f"[red]{exc.code}[/]: {escape(exc.message)}", highlight=False)
    if exc.hint:
        err_console.print(f"hint: {exc.hint}", markup=False, highlight=False)


def main() -> None:
    """Entry point: one error edge for every command (OSError and database errors included)."""
    try:
        # standalone_mode=False returns the exit code of typer.Exit instead of raising it.
        rc = app(standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except KnowbaseError as exc:
        _print_error(exc)
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
        mapped = _library_error(exc)
        if mapped is None:
            raise
        _print_error(mapped)
        sys.exit(1)


if __name__ == "__main__":
    main()
