"""``kb tree``, ``kb read`` (``--grep``), ``kb rm``, ``kb reindex`` on a real home (CliRunner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from knowbase.errors import InvalidPattern, NotFound
from knowbase.interfaces.cli import concepts as cli_concepts
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import Settings

pytestmark = pytest.mark.timeout(60)

TEXT = "# Notes\n\nalpha beta\ngamma ALPHA\n\n## More\n\ndelta"


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    cli_concepts.register(app)
    return app


@pytest.fixture
def home_with_doc(kb_settings: Settings, src: Path) -> Path:
    with Knowledge(kb_settings) as kb:
        base = kb.create_base("docs", file_processor_id=None)
        (src / "notes.md").write_text(TEXT, encoding="utf-8")
        (src / "other.md").write_text("other words", encoding="utf-8")
        kb.add(
            base.id, [AddInput.file(src / "notes.md"), AddInput.file(src / "other.md")], wait=True
        )
    return kb_settings.home


def json_of(app: typer.Typer, home: Path, *args: str) -> dict:
    result = CliRunner().invoke(app, [*args, "--home", str(home), "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout)


def test_commands_have_help(app: typer.Typer) -> None:
    for name in ("tree", "read", "rm", "reindex", "mcp"):
        result = CliRunner().invoke(app, [name, "--help"])
        assert result.exit_code == 0 and "--home" in result.stdout, name
    assert "--allow-writes" in CliRunner().invoke(app, ["mcp", "--help"]).stdout


def test_tree(app: typer.Typer, home_with_doc: Path) -> None:
    data = json_of(app, home_with_doc, "tree", "docs")
    assert [n["concept_id"] for n in data["nodes"]] == ["notes.md", "other.md"]
    assert data["total_items"] == 2 and data["truncated"] is False
    plain = CliRunner().invoke(app, ["tree", "docs", "--home", str(home_with_doc)])
    assert plain.exit_code == 0 and "notes.md" in plain.stdout


def test_read_slice_and_grep(app: typer.Typer, home_with_doc: Path) -> None:
    plain = CliRunner().invoke(app, ["read", "docs", "notes.md", "--home", str(home_with_doc)])
    assert plain.exit_code == 0 and plain.stdout == TEXT + "\n"
    part = json_of(app, home_with_doc, "read", "docs", "notes.md", "--from", "9", "--to", "14")
    assert part["content"] == "alpha" and part["total_chars"] == len(TEXT)
    found = json_of(app, home_with_doc, "read", "docs", "notes.md", "--grep", "alpha")
    assert [m["line"] for m in found["matches"]] == [3, 4]
    strict = json_of(
        app, home_with_doc, "read", "docs", "notes.md", "--grep", "alpha", "--case-sensitive"
    )
    assert strict["total_matches"] == 1
    lines = CliRunner().invoke(
        app, ["read", "docs", "notes.md", "--grep", "delta", "--home", str(home_with_doc)]
    )
    assert lines.stdout == f"8:{TEXT.index('delta')}: delta\n"


def test_grep_long_line_and_stopped_scan(
    app: typer.Typer, kb_settings: Settings, src: Path
) -> None:
    with Knowledge(kb_settings) as kb:
        base = kb.create_base("long", file_processor_id=None)
        (src / "long.txt").write_text("a" * 49_990 + "needle" + "\nok", encoding="utf-8")
        kb.add(base.id, [AddInput.file(src / "long.txt")], wait=True)
    home = kb_settings.home
    found = json_of(app, home, "read", "long", "long.txt", "--grep", "needle$")
    assert [(m["line"], m["char_start"]) for m in found["matches"]] == [(1, 49_990)]
    assert found["partial"] is False
    slow = json_of(app, home, "read", "long", "long.txt", "--grep", "(a+)+$")
    assert slow["partial"] is True and slow["stopped"] == "time_budget"
    plain = CliRunner().invoke(
        app, ["read", "long", "long.txt", "--grep", "(a+)+$", "--home", str(home)]
    )
    assert plain.exit_code == 0
    assert "stopped early: the pattern ran out of its 1 s time budget in line 1" in " ".join(
        plain.stderr.split()
    )


def test_read_errors_are_knowbase_errors(app: typer.Typer, home_with_doc: Path) -> None:
    missing = CliRunner().invoke(app, ["read", "docs", "../notes.md", "--home", str(home_with_doc)])
    assert isinstance(missing.exception, NotFound)  # the main app's error edge renders it
    bad = CliRunner().invoke(
        app, ["read", "docs", "notes.md", "--grep", "(", "--home", str(home_with_doc)]
    )
    assert isinstance(bad.exception, InvalidPattern)


def test_rm_and_reindex(app: typer.Typer, home_with_doc: Path, src: Path) -> None:
    (src / "other.md").write_text("other words, rewritten", encoding="utf-8")
    both = CliRunner().invoke(app, ["reindex", "docs", "other.md", "nope.md", "--home",
                                    str(home_with_doc), "--json"])  # fmt: skip
    assert both.exit_code == 1  # nope.md matched nothing (issue 42); other.md is still applied
    refreshed = json.loads(both.stdout)
    assert refreshed["applied"] == ["other.md"] and refreshed["not_found"] == ["nope.md"]
    after = json_of(app, home_with_doc, "read", "docs", "other.md")
    assert after["content"] == "other words, rewritten"

    removed = json_of(app, home_with_doc, "rm", "docs", "notes.md", "notes.md")
    assert removed["applied"] == ["notes.md"] and removed["not_found"] == []
    tree = json_of(app, home_with_doc, "tree", "docs")
    assert [n["title"] for n in tree["nodes"]] == ["other.md"]
    again = CliRunner().invoke(app, ["rm", "docs", "notes.md", "--home", str(home_with_doc),
                                     "--json"])  # fmt: skip
    assert again.exit_code == 1  # a name that matches nothing (issue 42)
    assert json.loads(again.stdout) == {"applied": [], "not_found": ["notes.md"], "job_id": None}


def test_mcp_refuses_unknown_scope(app: typer.Typer, home_with_doc: Path) -> None:
    result = CliRunner().invoke(app, ["mcp", "--base", "nope", "--home", str(home_with_doc)])
    assert isinstance(result.exception, NotFound)
    assert "refusing to start" in str(result.exception)
