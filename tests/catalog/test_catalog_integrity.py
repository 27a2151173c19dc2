"""The catalog is never recreated where one was expected (issue 26 items 1 and 2): a zero-length,
missing, damaged or truncated ``catalog.sqlite`` beside existing bases opens as
``catalog_unavailable`` with the reason and the recovery step, is left as it was, and readiness
says so — also when it is damaged under a running ``Knowledge``. A fresh home still creates its
catalog."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from knowbase.errors import CatalogUnavailable
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.service.readiness import readiness
from knowbase.settings import Settings

pytestmark = pytest.mark.timeout(60)


def _settings(home: Path) -> Settings:
    return Settings(home=home, test_providers=True)


@pytest.fixture
def used_home(tmp_path: Path) -> Path:
    """A home with one base holding one completed item; the catalog closed and checkpointed."""
    home = tmp_path / "home"
    with Knowledge(_settings(home)) as kb:
        kb.create_base("docs", file_processor_id=None)
        kb.add("docs", [AddInput.note("otters hold hands")], wait=True)
    for extra in home.glob("catalog.sqlite-*"):
        extra.unlink()
    return home


def _truncate_pages(data: bytes) -> bytes:
    return data[: (len(data) // 2) // 4096 * 4096]  # whole pages: the header looks fine


DAMAGE: dict[str, Callable[[Path], None]] = {
    "zero-length": lambda p: p.write_bytes(b""),
    "missing": lambda p: p.unlink(),
    "random-bytes": lambda p: p.write_bytes(bytes(range(256)) * 512),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:50_000]),
    "truncated-to-pages": lambda p: p.write_bytes(_truncate_pages(p.read_bytes())),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_catalog_is_reported_never_recreated(used_home: Path, damage: str) -> None:
    catalog = used_home / "catalog.sqlite"
    DAMAGE[damage](catalog)
    before = catalog.read_bytes() if catalog.exists() else None

    with Knowledge(_settings(used_home)) as kb:  # opens: a server must be able to say why
        assert kb.catalog_problem is not None
        with pytest.raises(CatalogUnavailable) as err:
            kb.list_bases()
        assert err.value.status == 503 and err.value.code == "catalog_unavailable"
        assert "backup" in (err.value.hint or "")
        with pytest.raises(CatalogUnavailable):
            kb.search("docs", "otters")
        report = readiness(kb)
        assert report["status"] == "unavailable"
        catalog_row = report["components"][0]
        assert catalog_row["component"] == "catalog" and catalog_row["status"] == "unavailable"
        assert "not recreated" in catalog_row["reason"]
        kb.start_workers()  # refuses quietly to run jobs against it
        assert not kb._workers.running

    assert (catalog.read_bytes() if catalog.exists() else None) == before  # left as it was
    assert any((used_home / "bases").iterdir())  # the bases' files are untouched


def test_a_fresh_home_creates_its_catalog(tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    with Knowledge(_settings(home)) as kb:
        assert kb.catalog_problem is None
        kb.create_base("docs", file_processor_id=None)
        assert [b.name for b in kb.list_bases()] == ["docs"]


def test_an_empty_catalog_file_without_bases_is_a_fresh_home(tmp_path: Path) -> None:
    """A process killed between creating the file and writing the schema leaves zero bytes;
    with no base folder there is nothing to lose, so the catalog is created."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "catalog.sqlite").write_bytes(b"")
    with Knowledge(_settings(home)) as kb:
        assert kb.catalog_problem is None
        assert kb.list_bases() == []


@pytest.mark.parametrize("damage", ["zero-length", "random-bytes"])
def test_damage_under_a_running_process_turns_readiness_unavailable(
    used_home: Path, damage: str
) -> None:
    with Knowledge(_settings(used_home)) as kb:
        assert readiness(kb)["status"] == "ready"
        assert [b.name for b in kb.list_bases()] == ["docs"]
        DAMAGE[damage](used_home / "catalog.sqlite")
        report = readiness(kb)
        assert report["status"] == "unavailable", report
        assert report["components"][0]["reason"].startswith("catalog_unavailable")


def test_a_damage_message_reads_as_a_sentence(tmp_path: Path) -> None:
    """Issue 42: "the catalog … is damaged (…)", never "… is I/O error (disk I/O error)"; and
    an I/O fault is named as one (issue 37), not as damage."""
    from knowbase.catalog.db import Catalog
    from knowbase.sqlite_faults import fault_error

    path = tmp_path / "catalog.sqlite"
    path.write_bytes(bytes(range(256)) * 64)
    catalog = Catalog(f"sqlite:///{path}")
    try:
        with pytest.raises(CatalogUnavailable) as raised, catalog.read() as conn:
            conn.exec_driver_sql("SELECT * FROM sqlite_master")
    finally:
        catalog.dispose()
    assert raised.value.message.startswith(f"the catalog {path} is damaged ("), raised.value
    io = fault_error("io", path, "disk I/O error [SQLITE_IOERR_READ]", "catalog")
    assert io.code == "database_io_error"
    assert io.message.startswith(f"I/O error on the catalog ({path}): disk I/O error")
