"""Run Alembic migrations programmatically (no alembic.ini needed at run time).

``Knowledge`` upgrades its catalog to head every time it opens (:meth:`Catalog.create_schema`),
so an embedded home never needs a step of its own. ``kb migrate`` runs the same upgrade on
purpose, reports the revisions, and ``--check`` lets a deploy script ask first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

from knowbase.errors import CatalogRevisionUnknown

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade_to_head(engine: Engine) -> None:
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
    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    assert head is not None  # the chain has one head (0001 is its root)
    return head


def migration_state(engine: Engine) -> MigrationState:
    """The database's revision and this release's head; CatalogRevisionUnknown when the
    database was migrated past anything this release knows (a newer knowbase)."""
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
