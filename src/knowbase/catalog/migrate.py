"""Run Alembic migrations programmatically (no alembic.ini needed at run time).

``Knowledge`` upgrades its catalog to head every time it opens (:meth:`Catalog.create_schema`),
so an embedded home never needs a step of its own. ``kb migrate`` runs the same upgrade on
purpose, reports the revisions, and ``--check`` lets a deploy script ask first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from knowbase.errors import CatalogRevisionUnknown

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"

#: The newest migration's revision. Every open compares the catalog against it with one plain
#: query, so a catalog at head never loads Alembic (~0.2 s of imports, a sixth of a cold
#: ``kb search``). ``tests/catalog/test_catalog_migrations.py`` checks it is Alembic's head: a
#: new migration must move it.
HEAD_REVISION = "0009b"


def alembic_config(engine: Engine) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def stored_revision(engine: Engine) -> str | None:
    """The revision in the catalog's ``alembic_version`` table, read without Alembic; None
    when there is no such table or it does not hold exactly one row."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table("alembic_version"):
            return None
        rows = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
    return rows[0] if len(rows) == 1 else None


def upgrade_to_head(engine: Engine) -> None:
    """Bring the catalog to head; a catalog already there costs one query."""
    if stored_revision(engine) == HEAD_REVISION:
        return
    from alembic import command

    command.upgrade(alembic_config(engine), "head")


@dataclass(frozen=True)
class MigrationState:
    """Where a catalog database stands: ``current`` None means no schema at all."""

    current: str | None
    head: str

    @property
    def behind(self) -> bool:
        return self.current != self.head

    def to_dict(self) -> dict[str, object]:
        return {"current": self.current, "head": self.head, "behind": self.behind}


def head_revision() -> str:
    """Alembic's head, read from the migration scripts."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    assert head is not None  # the chain has one head (0001 is its root)
    return head


def migration_state(engine: Engine) -> MigrationState:
    """The database's revision and this release's head; CatalogRevisionUnknown when the
    database was migrated past anything this release knows (a newer knowbase)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    head = head_revision()
    known = {rev.revision for rev in ScriptDirectory(str(MIGRATIONS)).walk_revisions()}
    if current is not None and current not in known:
        raise CatalogRevisionUnknown(
            f"the catalog is at revision {current!r}, which this knowbase does not know",
            current=current,
            head=head,
        )
    return MigrationState(current, head)


def migrate(engine: Engine) -> tuple[MigrationState, MigrationState]:
    """Upgrade to head (a no-op when current); the states before and after."""
    before = migration_state(engine)
    if before.behind:
        upgrade_to_head(engine)
    return before, migration_state(engine)
