"""The real ``kb migrate``, ``kb export`` and ``kb import`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command

from knowbase.catalog.db import Catalog
from knowbase.catalog.migrate import alembic_config, head_revision, migration_state

pytestmark = pytest.mark.timeout(180)


def kb(*args: str, home: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "KNOWBASE_HOME": str(home), **(env or {})},
        timeout=120,
    )


def old_catalog(home: Path, revision: str) -> None:
    """A catalog that an older release made: migrated only up to ``revision``."""
    home.mkdir(parents=True, exist_ok=True)
    catalog = Catalog(f"sqlite:///{home / 'catalog.sqlite'}")
    try:
        command.upgrade(alembic_config(catalog.engine), revision)
    finally:
        catalog.dispose()


def test_migrate_check_then_upgrade_an_old_catalog(tmp_path: Path) -> None:
    home = tmp_path / "home"
    old_catalog(home, "0003y")
    check = kb("migrate", "--check", "--json", home=home)
    assert check.returncode == 4, check.stderr
    assert json.loads(check.stdout) == {"current": "0003y", "head": head_revision(), "behind": True}
    done = kb("migrate", "--json", home=home)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"from": "0003y", "to": head_revision(), "changed": True}
    assert kb("migrate", "--check", home=home).returncode == 0
    again = kb("migrate", home=home)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    catalog = Catalog(f"sqlite:///{home / 'catalog.sqlite'}")
    try:
        assert not migration_state(catalog.engine).behind
    finally:
        catalog.dispose()


def test_migrate_check_on_an_empty_database_is_behind(tmp_path: Path) -> None:
    proc = kb("migrate", "--check", "--json", home=tmp_path / "fresh")
    assert proc.returncode == 4
    assert json.loads(proc.stdout)["current"] is None


def test_migrate_refuses_a_newer_catalog(tmp_path: Path) -> None:
    home = tmp_path / "home"
    old_catalog(home, "head")
    catalog = Catalog(f"sqlite:///{home / 'catalog.sqlite'}")
    with catalog.write_tx() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999z'")
    catalog.dispose()
    proc = kb("migrate", "--check", home=home)
    assert proc.returncode == 1
    assert "catalog_revision_unknown" in proc.stderr


def test_export_import_and_name_clash_on_the_cli(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert kb("base", "create", "wild", "--embedding", "hash:d16", home=a).returncode == 0
    note = "Sea otters hold hands while they sleep."
    assert kb("add", "wild", "--note", note, home=a).returncode == 0
    archive = tmp_path / "wild.kbz"
    out = kb("export", "wild", str(archive), "--json", home=a)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["vectors"] == 1
    imported = kb("import", str(archive), "--json", home=b)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["base"]["name"] == "wild"
    clash = kb("import", str(archive), home=b)
    assert clash.returncode == 1 and "base_exists" in clash.stderr
    renamed = kb("import", str(archive), "--name", "tame", "--json", home=b)
    assert renamed.returncode == 0, renamed.stderr
    hits = json.loads(kb("search", "tame", "otters", "--json", home=b).stdout)["results"]
    assert hits[0]["text"] == note
    archive.write_bytes(archive.read_bytes()[:100])
    broken = kb("import", str(archive), "broken", home=b)
    assert broken.returncode == 1 and "archive_invalid" in broken.stderr
