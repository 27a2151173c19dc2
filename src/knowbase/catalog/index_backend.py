"""A base's ``index_backend`` column: the names it may hold and which a catalog allows.

The catalog checks these when it writes a base; :mod:`knowbase.index.backends` opens what they
name. Kept here so that the catalog needs nothing from the index room above it.
"""

from __future__ import annotations

from knowbase.errors import InvalidInput

SQLITE = "sqlite"
POSTGRES = "postgres"
QDRANT = "qdrant"
NAMES = (SQLITE, POSTGRES, QDRANT)


def check_usable(name: str, dialect: str) -> None:
    """Raise InvalidInput unless a base of this catalog (``dialect``) can use backend ``name``:
    a configuration error the caller fixes, not an index that is down."""
    if name not in NAMES:
        raise InvalidInput(
            f"unknown index backend {name!r}", index_backend=name, known=sorted(NAMES)
        )
    if name == POSTGRES and dialect != "postgresql":
        raise InvalidInput(
            "the postgres index backend needs the catalog on PostgreSQL",
            hint="set KNOWBASE_DATABASE_URL to a PostgreSQL database, or use index_backend "
            "'sqlite' or 'qdrant'",
            index_backend=name,
            catalog=dialect,
        )


def default_for(dialect: str) -> str:
    """The backend a new base gets: its index next to the catalog."""
    return POSTGRES if dialect == "postgresql" else SQLITE
