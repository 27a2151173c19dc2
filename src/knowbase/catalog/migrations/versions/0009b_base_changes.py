"""Changes to a base that start no job, with who asked: the ``base_change`` table.

Creating a base, changing its settings and deleting it are recorded with the API key and the
surface (as ``job.by_key``/``by_surface`` are for jobs). Empty for what happened before.

Revision ID: 0009b
Revises: 0008k
"""

import sqlalchemy as sa
from alembic import op

revision = "0009b"
down_revision = "0008k"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # 0001 builds the schema module as it is now, so a fresh database has the table already.
    if sa.inspect(op.get_bind()).has_table("base_change"):
        return
    op.create_table(
        "base_change",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("base_id", sa.String(36), nullable=False),
        sa.Column("base_name", sa.String(200), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("details", sa.Text, nullable=True),
        sa.Column("by_key", sa.String(64), nullable=True),
        sa.Column("by_surface", sa.String(16), nullable=True),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.CheckConstraint(
            "action IN ('create', 'settings', 'labels', 'delete')", name="base_change_action_check"
        ),
    )
    op.create_index("base_change_base_idx", "base_change", ["base_id", "at"])


def downgrade() -> None:
    op.drop_index("base_change_base_idx", table_name="base_change")
    op.drop_table("base_change")
