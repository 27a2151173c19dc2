"""Every declared base setting (catalog/base_settings.py) reaches every surface: the HTTP models,
the options of ``kb base create``/``kb base set``, the console's settings form and an archive.
A setting added to the declaration shows up in each without a line of its own there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from knowbase.catalog.base_settings import MUTABLE, NAMES, PORTABLE, SETTINGS, BaseSetting
from knowbase.interfaces.cli import app
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(120)


def other_value(s: BaseSetting) -> Any:
    """A valid value that is not the setting's default."""
    if s.type is bool:
        return not s.default
    if s.choices:
        return next(c for c in s.choices if c != s.default)
    if s.suggestions:
        return next(c for c in s.suggestions if c != s.default and s.refusal(c) is None)
    if s.type is int:
        return s.default + 1 if s.default is not None else int(s.minimum or 0) + 7
    if s.type is float:
        return 0.25 if s.default != 0.25 else 0.75
    return "hash:r" if s.input_pattern else "|"  # a model id (test provider) or free text


def cli_args(values: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for name, value in values.items():
        flag = {s.name: s for s in SETTINGS}[name].cli_flag
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + flag.removeprefix("--"))
        else:
            out += [flag, str(value)]
    return out


def _options(command: str) -> set[str]:
    group = typer.main.get_command(app).commands["base"]  # type: ignore[attr-defined]
    cmd = group.commands[command]
    return {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}


def test_the_http_models_carry_every_setting() -> None:
    from knowbase.interfaces.http.models import BaseCreate, BaseOut, BaseSettingsPatch

    assert set(NAMES) <= set(BaseOut.model_fields)
    assert set(BaseSettingsPatch.model_fields) == {"name", *MUTABLE}
    assert set(NAMES) <= set(BaseCreate.model_fields)
    patch = BaseSettingsPatch.model_json_schema()["properties"]
    for s in SETTINGS:
        assert patch[s.name]["description"] == s.help


def test_kb_base_create_and_set_have_an_option_per_setting() -> None:
    create, set_ = _options("create"), _options("set")
    for s in SETTINGS:
        assert s.cli_flag in create, s.name
        assert (s.cli_flag in set_) == s.mutable, s.name
    # the flags people type today (the contract)
    assert {"--rerank", "--processor", "--chunk-size", "--url-max-age", "--rrf-k"} <= create
    assert {"--sync-deletes", "--no-sync-deletes", "--allow-local-urls"} <= set_


def test_every_setting_round_trips_through_cli_http_and_an_archive(
    kb: Knowledge, home: Path, tmp_path: Path
) -> None:
    """Non-default values: ``kb base create`` with all of them, ``kb base set`` back to the
    defaults (or cleared), ``PATCH`` to them again, export and import: each step keeps every
    setting."""
    from fastapi.testclient import TestClient

    from knowbase.interfaces.http import create_app

    values = {s.name: other_value(s) for s in SETTINGS}
    kb.close()
    # the CLI opens the catalog the fixture's does (PostgreSQL under KB_TEST_BACKENDS=postgres)
    url = kb.settings.database_url
    runner = CliRunner(env={"KNOWBASE_DATABASE_URL": url} if url else None)
    done = runner.invoke(
        app, ["base", "create", "b", *cli_args(values), "--home", str(home), "--json"]
    )
    assert done.exit_code == 0, done.output
    assert {k: json.loads(done.stdout)[k] for k in NAMES} == values

    defaults = {s.name: s.default for s in SETTINGS if s.mutable and s.default is not None}
    cleared = {s.cli_flag: str(s.cli_null) for s in SETTINGS if s.cli_null is not None}
    args = [*cli_args(defaults), *(x for pair in cleared.items() for x in pair)]
    done = runner.invoke(app, ["base", "set", "b", *args, "--home", str(home), "--json"])
    assert done.exit_code == 0, done.output
    after = json.loads(done.stdout)
    # a nullable setting without a clear word (threshold, document_count) keeps its value
    kept = {s.name for s in SETTINGS if s.default is None and s.cli_null is None}
    expected = {s.name: values[s.name] if s.name in kept else s.default for s in SETTINGS}
    assert {k: after[k] for k in NAMES} == expected

    with Knowledge(kb.settings) as again:
        client = TestClient(create_app(again), base_url="http://127.0.0.1")
        r = client.patch("/bases/b", json={k: values[k] for k in MUTABLE})
        assert r.status_code == 200, r.text
        assert {k: r.json()[k] for k in NAMES} == values
        again.export_base("b", tmp_path / "b.zip")
        copy = again.import_base(tmp_path / "b.zip", "copy").base
        assert {k: getattr(copy, k) for k in PORTABLE} == {k: values[k] for k in PORTABLE}


def test_the_console_form_has_a_field_per_setting(kb: Knowledge) -> None:
    from fastapi.testclient import TestClient

    from knowbase.interfaces.console.settings_form import form_fields
    from knowbase.interfaces.http import create_app

    assert [f["name"] for f in form_fields()] == [s.name for s in SETTINGS if s.mutable]
    page = TestClient(create_app(kb), base_url="http://127.0.0.1").get("/console/bases/x").text
    for f in form_fields():
        assert f'id="{f["id"]}" name="{f["name"]}"' in page, f["name"]
    # the ids and labels the console's own tests (and people) use
    assert 'id="set-chunk-size"' in page and ">Results per search <input" in page


def test_an_archive_manifest_carries_every_portable_setting() -> None:
    from knowbase.portable import archive_format

    assert set(PORTABLE) <= set(archive_format.SETTINGS)
    assert set(archive_format.SETTINGS) - set(PORTABLE) == {
        "name",
        "embedding_model_id",
        "dimensions",
    }
