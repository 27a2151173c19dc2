"""Outlines and section reads on the CLI (``kb outline``, ``kb read --section``) and over real
HTTP on loopback (``GET /bases/{base}/concepts/{id}/outline``, ``concepts/read?section=``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from knowbase.interfaces.cli import concepts as cli_concepts
from knowbase.interfaces.http import create_app
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import Settings

pytestmark = pytest.mark.timeout(60)

GUIDE = (
    "# Guide\n\nWelcome.\n\n## Install\n\nRun pip.\n\n| Key | Value |\n|---|---|\n| port | 8080 |"
    "\n\n## Usage\n\n" + "Use it well. " * 200 + "\n\n# Appendix\n\nMore."
)


@pytest.fixture
def home_with_guide(kb_settings: Settings, src: Path) -> Path:
    """A base ``docs`` holding ``manuals/guide.md`` (a Concept ID with a slash)."""
    with Knowledge(kb_settings) as kb:
        base = kb.create_base("docs", file_processor_id=None)
        (src / "manuals").mkdir()
        (src / "manuals" / "guide.md").write_text(GUIDE, encoding="utf-8")
        kb.add(base.id, [AddInput.directory(src / "manuals")], wait=True)
        assert kb.concepts.outline("docs", "manuals/guide.md")["nodes"]
    return kb_settings.home


# --- CLI ----------------------------------------------------------------------------------------
@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    cli_concepts.register(app)
    return app


def run(app: typer.Typer, home: Path, *args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--home", str(home)])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def test_cli_outline_and_section_read(app: typer.Typer, home_with_guide: Path) -> None:
    plain = run(app, home_with_guide, "outline", "docs", "manuals/guide.md")
    lines = [ln.rstrip() for ln in plain.splitlines()]
    assert lines[0].startswith("1 Guide") and lines[1].startswith("  1.1 Install")
    assert "    table: Key | Value" in lines
    assert any(ln.startswith("2 Appendix") for ln in lines)
    data = json.loads(run(app, home_with_guide, "outline", "docs", "manuals/guide.md", "--json"))
    assert [n["id"] for n in data["nodes"]] == ["1", "1.1", "1.2", "2"]
    top = json.loads(
        run(app, home_with_guide, "outline", "docs", "manuals/guide.md", "--depth", "1", "--json")
    )
    assert [n["id"] for n in top["nodes"]] == ["1", "2"]

    install = run(app, home_with_guide, "read", "docs", "manuals/guide.md", "--section", "1.1")
    assert install.startswith("## Install") and "| port | 8080 |" in install
    assert "Usage" not in install
    args = ["read", "docs", "manuals/guide.md", "--section", "Guide > Usage", "--max-tokens", "100"]
    first = json.loads(run(app, home_with_guide, *args, "--json"))
    assert first["truncated"] and first["next_cursor"].startswith("1.2@")
    rest = run(
        app, home_with_guide, "read", "docs", "manuals/guide.md", "--cursor", first["next_cursor"]
    )
    assert rest.startswith("Use it well.") and "Appendix" not in rest


def test_cli_unknown_section_is_an_error(app: typer.Typer, home_with_guide: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["read", "docs", "manuals/guide.md", "--section", "Nope", "--home", str(home_with_guide)],
    )
    assert result.exit_code != 0
    mixed = CliRunner().invoke(
        app,
        ["read", "docs", "manuals/guide.md", "--section", "1.1", "--grep", "pip"]
        + ["--home", str(home_with_guide)],
    )
    assert mixed.exit_code == 2 and "--grep" in mixed.output


# --- HTTP ---------------------------------------------------------------------------------------
@pytest.fixture
def client(kb_settings: Settings, home_with_guide: Path, live_server) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    with Knowledge(kb_settings) as kb:
        url = live_server(create_app(kb))
        with httpx.Client(base_url=url, timeout=20) as c:
            yield c


def test_http_outline_by_a_concept_id_with_slashes(client: httpx.Client) -> None:
    r = client.get("/bases/docs/concepts/manuals/guide.md/outline")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["concept_id"] == "manuals/guide.md" and body["kind"] == "headings"
    assert [(n["id"], n["title"]) for n in body["nodes"]] == [
        ("1", "Guide"),
        ("1.1", "Install"),
        ("1.2", "Usage"),
        ("2", "Appendix"),
    ]
    assert body["nodes"][1]["tables"] == [
        {"label": "Key | Value", "char_start": body["nodes"][1]["tables"][0]["char_start"]}
    ]
    encoded = client.get("/bases/docs/concepts/manuals%2Fguide.md/outline", params={"depth": 1})
    assert [n["id"] for n in encoded.json()["nodes"]] == ["1", "2"]
    under = client.get("/bases/docs/concepts/manuals/guide.md/outline", params={"under": "1.2"})
    assert [n["id"] for n in under.json()["nodes"]] == ["1.2"]
    missing = client.get("/bases/docs/concepts/manuals/nope.md/outline")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    assert client.get("/bases/docs/concepts/manuals/guide.md/outline?depth=0").status_code == 422
    schema = client.get("/openapi.json").json()
    assert "/bases/{base}/concepts/{concept_id}/outline" in schema["paths"]


def test_http_section_read(client: httpx.Client) -> None:
    params = {"concept_id": "manuals/guide.md", "section": "Install"}
    r = client.get("/bases/docs/concepts/read", params=params)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["content"].startswith("## Install") and body["next_cursor"] is None
    assert body["section"]["path"] == ["Guide", "Install"]
    first = client.get(
        "/bases/docs/concepts/read",
        params={"concept_id": "manuals/guide.md", "section": "1.2", "max_tokens": 100},
    ).json()
    assert first["truncated"] and first["next_cursor"]
    rest = client.get(
        "/bases/docs/concepts/read",
        params={"concept_id": "manuals/guide.md", "cursor": first["next_cursor"]},
    ).json()
    assert rest["char_start"] >= first["char_end"] and rest["section"]["id"] == "1.2"
    plain = client.get("/bases/docs/concepts/read", params={"concept_id": "manuals/guide.md"})
    assert plain.json()["section"] is None and plain.json()["content"].startswith("# Guide")
    mixed = client.get(
        "/bases/docs/concepts/read",
        params={"concept_id": "manuals/guide.md", "section": "1.1", "char_start": 5},
    )
    assert mixed.status_code == 422 and mixed.json()["code"] == "invalid_input"
    unknown = client.get(
        "/bases/docs/concepts/read", params={"concept_id": "manuals/guide.md", "section": "Nope"}
    )
    assert unknown.status_code == 404 and unknown.json()["details"]["kind"] == "section"
