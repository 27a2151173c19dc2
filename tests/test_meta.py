"""Meta-tests: error codes unique and stable, light imports, every command documented."""

from __future__ import annotations

import subprocess
import sys

from knowbase.errors import KnowbaseError, all_error_classes


def test_error_codes_are_unique_and_snake_case():
    classes = [c for c in all_error_classes() if c.__module__.startswith("knowbase")]
    codes = [c.code for c in classes]
    assert len(codes) == len(set(codes)), codes
    for cls in classes:
        assert cls.code == cls.code.lower() and " " not in cls.code
        assert issubclass(cls, KnowbaseError)
        assert 400 <= cls.status < 600


def test_errors_carry_details_and_wire_shape():
    from knowbase.errors import NoTextExtracted

    exc = NoTextExtracted("nothing in scan.pdf", path="scan.pdf")
    assert exc.to_dict() == {
        "code": "no_text_extracted",
        "message": "nothing in scan.pdf",
        "details": {"path": "scan.pdf"},
        "hint": NoTextExtracted.hint,
    }


def test_cli_import_is_light():
    """``kb --help`` must not import torch, FastAPI or mcp."""
    code = (
        "import sys, knowbase, knowbase.interfaces.cli, knowbase.service\n"
        "heavy = [m for m in ('torch', 'fastapi', 'mcp', 'sentence_transformers', 'uvicorn')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_command_has_help():
    import click
    import typer.main

    from knowbase.interfaces.cli import app

    root = typer.main.get_command(app)

    def walk(cmd: click.Command, path: str) -> None:
        assert (cmd.help or "").strip(), f"{path} has no help"
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}")

    walk(root, "kb")
