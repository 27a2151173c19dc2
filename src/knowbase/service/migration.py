"""The catalog's schema, upgraded on purpose or only read (``kb migrate``, ``kb migrate --check``).

Every ``Knowledge`` upgrades the catalog when it opens its home; these work on the catalog
alone, before any ``Knowledge`` can: a deploy script asks whether the database is behind, or
upgrades it and learns from which revision to which.

    >>> catalog_state(load_settings(home)).behind               # doctest: +SKIP
    False
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from knowbase.catalog.db import Catalog
from knowbase.catalog.migrate import MigrationState, migrate, migration_state
from knowbase.settings import Settings


@contextmanager
def _catalog(settings: Settings) -> Iterator[Catalog]:
    if settings.database_url is None:  # the home's catalog.sqlite: its folder comes first
        settings.home.mkdir(parents=True, exist_ok=True)
    catalog = Catalog(settings.catalog_url)
    try:
        yield catalog
    finally:
        catalog.dispose()


def catalog_state(settings: Settings) -> MigrationState:
    """The catalog's revision, this release's head, and whether the catalog is behind it."""
    with _catalog(settings) as catalog:
        return migration_state(catalog.engine)


def migrate_catalog(settings: Settings) -> tuple[MigrationState, MigrationState]:
    """Upgrade the catalog to this release's schema (a no-op when current): the states before
    and after."""
    with _catalog(settings) as catalog:
        return migrate(catalog.engine)


__all__ = ["MigrationState", "catalog_state", "migrate_catalog"]
