"""``kb formats``: which files are read, and how (from :mod:`knowbase.pipeline.readers.formats`).

Registered on the main app by ``interfaces/cli/``; it needs no home and opens nothing.
"""

from __future__ import annotations

import json

import typer

from knowbase.interfaces.cli.options import JsonOpt


def register(app: typer.Typer) -> None:
    @app.command("formats")
    def formats(as_json: JsonOpt = False) -> None:
        """List the file formats knowbase reads, how each is read and how citations locate it."""
        from knowbase import FORMATS, TEXT_NAMES

        rows = [
            {
                "format": f.name,
                "extensions": list(f.extensions),
                "how": f.how,
                "locator": f.locator,
                **({"names": list(TEXT_NAMES)} if not f.extensions else {}),
            }
            for f in FORMATS
        ]
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        from rich.console import Console
        from rich.table import Table

        table = Table("format", "extensions", "how it is read", "locator")
        for row in rows:
            exts = " ".join(row["extensions"]) or " ".join(n.upper() for n in TEXT_NAMES[:6]) + "…"
            table.add_row(row["format"], exts, row["how"], row["locator"])
        Console().print(table)
