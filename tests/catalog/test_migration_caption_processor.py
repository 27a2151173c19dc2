"""Migration 0006c: the processor CHECK admits ``caption:<profile>:<model>`` (and the column
holds long model names) on SQLite and PostgreSQL; down, caption bases fall back to none."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from knowbase.catalog import bases as base_repo
from knowbase.catalog.db import Catalog
from knowbase.catalog.migrate import alembic_config
from knowbase.errors import InvalidInput

pytestmark = pytest.mark.timeout(120)

LONG = "caption:vis:" + "org/a-vision-model-with-a-long-name-" * 4


@pytest.fixture
def catalog(empty_catalog: Catalog) -> Catalog:  # SQLite, and PostgreSQL (slow)
    return empty_catalog


def _insert(cat: Catalog, base_id: str, processor: str | None) -> None:
    with cat.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO knowledge_base (id, name, name_key, file_processor_id, created_at,"
                " updated_at) VALUES (:id, :id, :id, :p, 0, 0)"
            ),
            {"id": base_id, "p": processor},
        )


def _processor(cat: Catalog, base_id: str) -> str | None:
    with cat.engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT file_processor_id FROM knowledge_base WHERE id = :id"), {"id": base_id}
        ).scalar_one()


def test_down_and_up_again(catalog: Catalog) -> None:
    catalog.create_schema()
    _insert(catalog, "ocr", "tesseract")
    _insert(catalog, "cap", LONG)
    command.downgrade(alembic_config(catalog.engine), "0005k")  # a catalog made before 0006c
    assert (_processor(catalog, "ocr"), _processor(catalog, "cap")) == ("tesseract", None)
    with pytest.raises(sa.exc.IntegrityError):
        _insert(catalog, "before", "caption:vis:llava")
    catalog.create_schema()  # to head
    assert _processor(catalog, "ocr") == "tesseract"
    _insert(catalog, "after", LONG)
    assert _processor(catalog, "after") == LONG
    for bad in ("caption:vis:", "caption::m", "ocrmypdf"):
        with pytest.raises(sa.exc.IntegrityError):
            _insert(catalog, f"bad{len(bad)}", bad)


def test_the_repository_checks_the_form_first(catalog: Catalog) -> None:
    catalog.create_schema()
    with catalog.write_tx() as conn:
        base = base_repo.insert(conn, name="B", file_processor_id="caption:vis:llava")
        assert base.file_processor_id == "caption:vis:llava"
        base = base_repo.update(conn, base.id, file_processor_id="tesseract")
        assert base.file_processor_id == "tesseract"
        for bad in ("caption:vis", "caption:v is:m", "caption:vis:m\nx", "easyocr"):
            with pytest.raises(InvalidInput):
                base_repo.update(conn, base.id, file_processor_id=bad)
