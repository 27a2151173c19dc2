"""Archives and ``copy_home`` into a real PostgreSQL 18 + pgvector (index backend ``postgres``).

SQLite home → archive → PostgreSQL home: same items, Concept IDs, chunk offsets, vectors
bit-equal (read back as ``real[]``), same results for sample queries, zero embedding calls.
``copy_home`` moves a whole embedded home (bases, items, jobs at rest) and verifies it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from knowbase.catalog.schema import job as job_t
from knowbase.errors import BaseExists
from knowbase.service import Knowledge
from knowbase.settings import Settings
from portable_checks import assert_same_base, build_source, count_embeddings, raw_tree, snapshot

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Knowledge]:
    kb = Knowledge(Settings(home=tmp_path / "a", test_providers=True))
    try:
        yield kb
    finally:
        kb.close()


@pytest.fixture
def pg_kb(tmp_path: Path, pg_server, pg_url: str) -> Iterator[Knowledge]:  # type: ignore[no-untyped-def]
    if not pg_server.has_vector:
        pytest.skip("the postgres backend needs pgvector: run .ci/pgvector.sh")
    kb = Knowledge(Settings(home=tmp_path / "pg", database_url=pg_url, test_providers=True))
    try:
        yield kb
    finally:
        kb.close()


def test_sqlite_archive_imports_into_postgres(
    source: Knowledge, pg_kb: Knowledge, tmp_path: Path
) -> None:
    build_source(source, tmp_path / "src")
    source.export_base("docs", tmp_path / "docs.kbz")
    with count_embeddings(pg_kb) as calls:
        report = pg_kb.import_base(tmp_path / "docs.kbz")
    assert calls == []
    assert report.base.index_backend == "postgres"
    assert_same_base(snapshot(source, "docs"), snapshot(pg_kb, "docs"))
    with pg_kb.rt.catalog.read() as conn:
        units = conn.execute(
            sa.text("SELECT count(*) FROM kb_unit WHERE base_id = :b"), {"b": report.base.id}
        ).scalar_one()
    assert units == report.units > 0
    # and back: PostgreSQL → archive → SQLite gives the same base again
    pg_kb.export_base("docs", tmp_path / "back.kbz")
    again = source.import_base(tmp_path / "back.kbz", "docs again")
    assert again.vectors == report.vectors
    assert_same_base(snapshot(source, "docs"), snapshot(source, "docs again"))


def test_copy_home_to_postgres(source: Knowledge, tmp_path: Path, pg_server, pg_url) -> None:  # type: ignore[no-untyped-def]
    if not pg_server.has_vector:
        pytest.skip("the postgres backend needs pgvector: run .ci/pgvector.sh")
    build_source(source, tmp_path / "src")
    plain = source.create_base("plain", file_processor_id=None)
    source.add_note(plain.id, "Alpacas give soft wool.")
    pending = source.add(plain.id, [_note("Queued while the workers were stopped.")])
    before = {b: snapshot(source, b) for b in ("docs",)}
    report = source.copy_home(pg_url, tmp_path / "pg")
    assert [b["base"] for b in report.bases] == ["docs", "plain"]
    assert all(b["searches"] > 0 for b in report.bases)
    assert report.jobs >= len(pending.job_ids)
    with Knowledge(
        Settings(home=tmp_path / "pg", database_url=pg_url, test_providers=True)
    ) as target:
        assert {b.id for b in target.list_bases()} == {b.id for b in source.list_bases()}
        assert_same_base(before["docs"], snapshot(target, "docs"))
        docs = source.get_base("docs").id
        assert raw_tree(target.rt.storage(docs).raw) == raw_tree(source.rt.storage(docs).raw)
        with target.rt.catalog.read() as conn:
            ids = {r[0] for r in conn.execute(sa.select(job_t.c.id))}
        assert set(pending.job_ids) <= ids
        # the job at rest runs on the target: its item completes there
        target.wait(pending.job_ids, timeout_s=60)
        assert target.counts("plain") == {"completed": 2}
        # a second copy is refused before anything is written
        with pytest.raises(BaseExists):
            source.copy_home(pg_url, tmp_path / "pg")


def _note(text: str):  # type: ignore[no-untyped-def]
    from knowbase.operations.add.inputs import AddInput

    return AddInput.note(text)


def _kb(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "KNOWBASE_DATABASE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", *args],
        capture_output=True,
        text=True,
        env={**env, "KNOWBASE_HOME": str(home)},
        timeout=180,
    )


def test_kb_copy_home_and_migrate_on_postgres(tmp_path: Path, pg_server, pg_url) -> None:  # type: ignore[no-untyped-def]
    if not pg_server.has_vector:
        pytest.skip("the postgres backend needs pgvector: run .ci/pgvector.sh")
    a = tmp_path / "a"
    assert _kb("base", "create", "wild", "--embedding", "hash:d16", home=a).returncode == 0
    note = "Sea otters hold hands while they sleep."
    assert _kb("add", "wild", "--note", note, home=a).returncode == 0
    out = _kb("copy-home", "--to", pg_url, "--to-home", str(tmp_path / "pg"), "--json", home=a)
    assert out.returncode == 0, out.stderr
    copied = json.loads(out.stdout)["bases"]
    assert [(b["base"], b["units"], b["vectors"]) for b in copied] == [("wild", 1, 1)]
    check = _kb("migrate", "--check", "--database-url", pg_url, "--json", home=a)
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["behind"] is False
    again = _kb("copy-home", "--to", pg_url, "--to-home", str(tmp_path / "pg2"), home=a)
    assert again.returncode == 1 and "base_exists" in again.stderr
    with Knowledge(
        Settings(home=tmp_path / "pg", database_url=pg_url, test_providers=True)
    ) as target:
        assert target.search("wild", "otters").results[0].text == note


def test_verify_copy_finds_a_difference(
    source: Knowledge, pg_kb: Knowledge, tmp_path: Path
) -> None:
    from knowbase.errors import CopyVerificationFailed
    from knowbase.portable.copy_home import copy_home, verify_copy

    build_source(source, tmp_path / "src")
    copy_home(source.rt, pg_kb.rt)
    base = pg_kb.get_base("docs")
    assert verify_copy(source.rt, pg_kb.rt, base.id)["searches"] > 0
    victim = next(i for i in pg_kb.list_items("docs") if i.concept_id == "rust.md")
    with pg_kb.rt.lease(base) as store:
        store.delete_materials([victim.id])  # the index loses one material, the catalog not
    with pytest.raises(CopyVerificationFailed) as exc:
        verify_copy(source.rt, pg_kb.rt, base.id)
    assert exc.value.code == "copy_verification_failed"


def test_a_copy_that_fails_part_way_leaves_the_target_empty(
    source: Knowledge, pg_kb: Knowledge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from knowbase.errors import CopyVerificationFailed
    from knowbase.portable import copy_home as module

    build_source(source, tmp_path / "src")
    second = source.create_base("second", file_processor_id=None)
    source.add(second.id, [_note("Waiting for a worker.")])  # its job at rest comes along
    real = module.verify_copy

    def second_differs(src, dst, base_id):  # type: ignore[no-untyped-def]
        if base_id == second.id:
            raise CopyVerificationFailed("injected: the second base differs")
        return real(src, dst, base_id)

    monkeypatch.setattr(module, "verify_copy", second_differs)
    with pytest.raises(CopyVerificationFailed, match="injected"):
        module.copy_home(source.rt, pg_kb.rt)
    assert pg_kb.list_bases() == []
    with pg_kb.rt.catalog.read() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(job_t)).scalar_one() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM kb_unit")).scalar_one() == 0
    assert [p for p in pg_kb.settings.bases_dir.iterdir()] == []
