"""The base settings' declaration (catalog/base_settings.py) against the catalog: the table, the
``Base`` row, the migrations and the checks every write runs all follow it. The surfaces'
derivations are pinned in tests/interfaces/test_base_settings_surfaces.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from knowbase.catalog import base_settings
from knowbase.catalog import bases as base_repo
from knowbase.catalog.base_settings import BY_NAME, SETTINGS
from knowbase.catalog.db import Catalog
from knowbase.catalog.migrate import MIGRATIONS
from knowbase.catalog.models import Base
from knowbase.errors import InvalidInput

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    cat = Catalog(f"sqlite:///{tmp_path / 'catalog.sqlite'}")
    cat.create_schema()
    yield cat  # type: ignore[misc]
    cat.dispose()


def test_every_setting_is_a_column_of_a_fresh_catalog(catalog: Catalog) -> None:
    columns = {c["name"]: c for c in sa.inspect(catalog.engine).get_columns("knowledge_base")}
    for s in SETTINGS:
        assert s.name in columns, s.name
        assert columns[s.name]["nullable"] == s.nullable, s.name


def test_every_setting_names_the_migration_that_adds_it() -> None:
    scripts = ScriptDirectory(str(MIGRATIONS))
    for s in SETTINGS:
        revision = scripts.get_revision(s.since)
        assert revision is not None, f"{s.name}: no revision {s.since!r}"
        if s.since != "0001":  # 0001 builds the schema module; later ones add columns by name
            assert f'"{s.name}"' in Path(revision.path).read_text(), (s.name, revision.path)


def test_a_base_row_has_every_setting_with_its_default(catalog: Catalog) -> None:
    fields = {f.name for f in dataclasses.fields(Base)}
    assert set(base_settings.NAMES) <= fields
    with catalog.write_tx() as conn:
        base = base_repo.insert(conn, name="b")
    for s in SETTINGS:
        assert getattr(base, s.name) == s.default, s.name
        assert s.name in base.to_dict()


def test_update_takes_the_mutable_settings() -> None:
    assert {"name", *base_settings.MUTABLE} == base_repo.UPDATABLE


def test_the_defaults_agree_with_the_query_layer() -> None:
    from knowbase.search import fusion
    from knowbase.search.rrf import K

    assert (
        BY_NAME["fusion"].default,
        BY_NAME["fusion_alpha"].default,
    ) == (fusion.DEFAULT_METHOD, fusion.DEFAULT_ALPHA)
    assert BY_NAME["fusion"].choices == fusion.METHODS
    assert BY_NAME["rrf_k"].default == K


# The messages people read (CLI, HTTP 422 from the facade): the contract of the old hand-written
# checks, now derived from the entries.
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"chunk_size": 0}, "chunk_size must be a positive number of tokens"),
        ({"chunk_overlap": -1}, "chunk_overlap must be 0 or more"),
        (
            {"chunk_size": 10, "chunk_overlap": 10},
            "chunk_overlap (10 tokens) must be smaller than chunk_size (10 tokens): lower the"
            " overlap as well, e.g. to 2",
        ),
        ({"chunk_strategy": "words"}, "chunk_strategy must be 'structured' or 'delimiter'"),
        (
            {"chunk_strategy": "delimiter", "chunk_separator": ""},
            "a separator is required with the delimiter strategy",
        ),
        ({"threshold": 1.5}, "threshold must be between 0 and 1"),
        ({"document_count": 0}, "document_count must be positive"),
        ({"url_max_age": -5}, "url_max_age must be 0 or more seconds"),
        (
            {"file_processor_id": "ocrmypdf"},
            "file_processor_id must be 'tesseract', 'caption:<profile>:<model>' or empty",
        ),
        ({"fusion": "max"}, "fusion must be 'rrf' or 'convex'"),
        ({"fusion_alpha": 2}, "fusion_alpha must be between 0 and 1"),
        ({"fusion_alpha": "high"}, "fusion_alpha must be between 0 and 1"),
        ({"rrf_k": 0}, "rrf_k must be a positive integer"),
        ({"rrf_k": 1.5}, "rrf_k must be a positive integer"),
        ({"sync_deletes": "yes"}, "sync_deletes must be true or false"),
        ({"fusion": None}, "fusion must be 'rrf' or 'convex'"),  # NOT NULL: a clear refusal
    ],
)
def test_validation_refuses_with_the_declared_message(values: dict, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        base_settings.validate(values)
    assert str(info.value) == message
    assert info.value.code == "invalid_input"


def test_validation_accepts_the_defaults_and_null_where_allowed() -> None:
    base_settings.validate(base_settings.defaults())
    base_settings.validate({s.name: None for s in SETTINGS if s.nullable})
    base_settings.validate({"threshold": 1, "fusion_alpha": 0})  # an integer is a number


@pytest.mark.parametrize(
    ("column", "value"), [("chunk_size", 0), ("threshold", 2.0), ("file_processor_id", "x")]
)
def test_the_table_checks_come_from_the_declaration(
    catalog: Catalog, column: str, value: object
) -> None:
    """A row written past the repository still meets the declared bounds (the CHECKs)."""
    with catalog.write_tx() as conn:
        base = base_repo.insert(conn, name="b")
    with pytest.raises(sa.exc.IntegrityError), catalog.write_tx() as conn:
        conn.execute(sa.text(f"UPDATE knowledge_base SET {column} = :v"), {"v": value})
    assert base.id


def test_check_sql_of_allowed_values_includes_each() -> None:
    """Adding an allowed value is one line: the CHECK, the message and the HTTP enum follow."""
    planted = dataclasses.replace(BY_NAME["chunk_strategy"], choices=("structured", "sentences"))
    assert planted.check_sql() == "chunk_strategy IN ('structured', 'sentences')"
    assert planted.error == "chunk_strategy must be 'structured' or 'sentences'"
    assert planted.refusal("sentences") is None
    assert planted.refusal("delimiter") == planted.error


def test_a_pattern_setting_states_its_check_and_refuses_what_does_not_match() -> None:
    processor = BY_NAME["file_processor_id"]
    assert processor.check_sql() == (
        "file_processor_id IS NULL OR file_processor_id = 'tesseract'"
        " OR file_processor_id LIKE 'caption\\:_%\\:_%'"
    )
    assert processor.refusal("caption:vision:qwen2.5-vl") is None
    assert processor.refusal("tesseract") is None
    assert processor.refusal("caption:") == processor.error
    assert processor.refusal("ocrmypdf") == processor.error
