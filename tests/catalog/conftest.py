"""Fixtures of the catalog tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from knowbase.catalog.db import Catalog


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def empty_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    """A catalog on an empty database (no schema yet): a SQLite file, and a fresh database on
    the embedded PostgreSQL server (slow). Migration tests build and move it themselves."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    else:
        url = request.getfixturevalue("pg_empty_url")
    cat = Catalog(url)
    yield cat
    cat.dispose()
