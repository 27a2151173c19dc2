"""Migration 0004e on a catalog made before it: old bases keep RRF, new ones get the default."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command

from knowbase.catalog import bases as base_repo
from knowbase.catalog.db import Catalog
from knowbase.catalog.migrate import alembic_config
from knowbase.errors import InvalidInput
from knowbase.search.fusion import DEFAULT_ALPHA, DEFAULT_METHOD, FusionSettings


def test_upgrade_keeps_old_bases_on_rrf(tmp_path: Path) -> None:
    cat = Catalog(f"sqlite:///{tmp_path / 'catalog.sqlite'}")
    try:
        command.upgrade(alembic_config(cat.engine), "0001")
        with cat.engine.begin() as conn:
            for col in ("fusion", "fusion_alpha", "rrf_k"):
                conn.exec_driver_sql(f"ALTER TABLE knowledge_base DROP COLUMN {col}")
            conn.exec_driver_sql(
                "INSERT INTO knowledge_base (id, name, name_key, created_at, updated_at)"
                " VALUES ('old', 'Old', 'old', 0, 0)"
            )
        cat.create_schema()  # to head
        with cat.write_tx() as conn:
            old = base_repo.get(conn, "old")
            new = base_repo.insert(conn, name="New")
        assert FusionSettings.of_base(old) == FusionSettings("rrf", 0.5, 60)
        assert (new.fusion, new.fusion_alpha, new.rrf_k) == (DEFAULT_METHOD, DEFAULT_ALPHA, 60)
    finally:
        cat.dispose()


def test_fusion_settings_update_and_validation(tmp_path: Path) -> None:
    cat = Catalog(f"sqlite:///{tmp_path / 'catalog.sqlite'}")
    try:
        cat.create_schema()
        with cat.write_tx() as conn:
            b = base_repo.insert(conn, name="B")
            b = base_repo.update(conn, b.id, fusion="rrf", fusion_alpha=0.3, rrf_k=20)
            assert FusionSettings.of_base(b) == FusionSettings("rrf", 0.3, 20)
            for bad in ({"fusion": "max"}, {"fusion_alpha": 2.0}, {"rrf_k": 0}):
                with pytest.raises(InvalidInput):
                    base_repo.update(conn, b.id, **bad)
    finally:
        cat.dispose()
