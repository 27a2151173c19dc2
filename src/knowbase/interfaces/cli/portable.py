"""``kb migrate``, ``kb export``, ``kb import``, ``kb copy-home`` (issue 14, operations).

Every ``kb`` command already upgrades the catalog when it opens the home (``Knowledge`` runs
the migrations at start); ``kb migrate`` does it on purpose and says from which revision to
which, and ``kb migrate --check`` only asks: exit 0 when current, :data:`EXIT_BEHIND` when the
database needs an upgrade (for deploy scripts), 1 on an error.
"""

from typing import Annotated

import typer

from knowbase.interfaces.cli.options import HomeOpt, JsonOpt

# Defined here, not imported from cli.py: run as ``python -m``, cli.py is ``__main__`` and a
# module-level import of it would re-import it half-built (typer reads these at run time).
DatabaseOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="KNOWBASE_DATABASE_URL",
        help="Catalog database, e.g. postgresql+psycopg://… (env KNOWBASE_DATABASE_URL; "
        "default: the home's catalog.sqlite).",
    ),
]

EXIT_BEHIND = 4


def register(app: typer.Typer) -> None:
    """Add the portable commands (migrate, export, import, copy-home) to ``app``."""
    app.command("migrate")(migrate)
    app.command("export")(export)
    app.command("import")(import_)
    app.command("copy-home")(copy_home)


def migrate(
    check: Annotated[
        bool, typer.Option("--check", help=f"Only check; exit {EXIT_BEHIND} when behind.")
    ] = False,
    database_url: DatabaseOpt = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Upgrade the catalog database to this release's schema (a no-op when current)."""
    from knowbase.interfaces.cli.options import console, emit
    from knowbase.service.migration import catalog_state, migrate_catalog
    from knowbase.settings import load_settings

    settings = load_settings(home, database_url=database_url)
    if check:
        state = catalog_state(settings)
        emit(
            state,
            as_json,
            lambda: console.print(
                f"catalog at {state.current or 'no schema'}, head {state.head}: "
                + ("behind, run kb migrate" if state.behind else "current")
            ),
        )
        if state.behind:
            raise typer.Exit(EXIT_BEHIND)
        return
    before, after = migrate_catalog(settings)
    out = {"from": before.current, "to": after.current, "changed": before.behind}
    emit(
        out,
        as_json,
        lambda: console.print(
            f"migrated {before.current or 'empty'} → {after.current}"
            if before.behind
            else f"already at {after.current}; nothing to do"
        ),
    )


def export(base: str, file: str, home: HomeOpt = None, as_json: JsonOpt = False) -> None:
    """Write one base to one archive file (settings, items, raw/ files, chunks, vectors)."""
    from knowbase.interfaces.cli.options import console, emit, open_kb

    with open_kb(home) as kb:
        report = kb.export_base(base, file)
    emit(report, as_json, lambda: console.print(_summary("exported", report)))


def import_(
    file: str,
    name: Annotated[str | None, typer.Argument(help="Name of the new base.")] = None,
    name_opt: Annotated[
        str | None, typer.Option("--name", help="Name of the new base (same as NAME).")
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option("--backend", help="Index backend (default: the home's: sqlite/postgres)."),
    ] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Make a new base from an archive; verified first, nothing is re-embedded."""
    from knowbase.interfaces.cli.options import console, emit, open_kb

    with open_kb(home) as kb:
        report = kb.import_base(file, name_opt or name, index_backend=backend)
    emit(report, as_json, lambda: console.print(_summary("imported", report)))


def copy_home(
    to: Annotated[
        str, typer.Option("--to", help="Target catalog: postgresql+psycopg://user@host/db")
    ],
    to_home: Annotated[
        str, typer.Option("--to-home", help="Target home (raw/ files; the shared root).")
    ],
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Copy this home (every base, jobs at rest) into a PostgreSQL deployment; verify it."""
    from knowbase.interfaces.cli.options import console, emit, open_kb

    with open_kb(home) as kb:
        report = kb.copy_home(to, to_home)

    def render() -> None:
        for b in report.bases:
            console.print(
                f"copied [bold]{b['base']}[/]: {sum(b['items'].values())} items, "
                f"{b['units']} units, {b['vectors']} vectors, {b['raw_files']} files; "
                f"{b['searches']} sample searches agree"
            )
        console.print(f"{report.jobs} jobs at rest copied")

    emit(report, as_json, render)


def _summary(verb: str, report) -> str:  # type: ignore[no-untyped-def]
    return (
        f"{verb} base [bold]{report.base.name}[/] ({report.items} items, {report.materials} "
        f"materials, {report.units} units, {report.vectors} vectors, {report.raw_files} files) "
        f"{'to' if verb == 'exported' else 'from'} {report.path}"
    )
