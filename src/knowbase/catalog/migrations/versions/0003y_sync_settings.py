"""`kb sync` settings: ``knowledge_base.sync_deletes`` and ``knowledge_base.url_max_age``.

``sync_deletes`` lets a sync remove items whose files vanished without ``--prune`` (off: nothing
is deleted by surprise); ``url_max_age`` (seconds, null: never) is how old a page snapshot may get
before a sync re-fetches it with a conditional GET.

Revision ID: 0003y
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0003y"
down_revision = "0002s"
branch_labels = None
depends_on = None


def _columns() -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns("knowledge_base")}


def upgrade() -> None:
    # 0001 builds the schema module as it is now, so a fresh database already has the columns.
    have = _columns()
    with op.batch_alter_table("knowledge_base") as batch:
        if "sync_deletes" not in have:
            batch.add_column(
                sa.Column("sync_deletes", sa.Boolean, nullable=False, server_default=sa.false())
            )
        if "url_max_age" not in have:
            batch.add_column(sa.Column("url_max_age", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("knowledge_base") as batch:
        batch.drop_column("url_max_age")
        batch.drop_column("sync_deletes")
