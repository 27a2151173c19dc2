"""Initial catalog: bases, items, jobs, workers.

Revision ID: 0001
Revises:
"""

from alembic import op

from knowbase.catalog.schema import metadata

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The first revision is the schema module itself; later revisions are explicit op.* steps.
    metadata.create_all(op.get_bind())


def downgrade() -> None:
    metadata.drop_all(op.get_bind())
