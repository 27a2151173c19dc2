"""Change feed and job retention: ``updated_at`` indexes, item tombstones, ``finished_at``.

The event stream reads items and jobs changed since it last looked (``(base_id, updated_at)``,
``(queue, updated_at)``) and deleted items from ``item_tombstone``; retention finds old
terminal jobs by ``finished_at``. 0001 builds the schema module as it is now, so on a fresh
database all of this exists already: every step checks first.

Revision ID: 0002j
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002j"
down_revision = "0001"
branch_labels = None
depends_on = None

INDEXES = (
    ("knowledge_item_base_updated_idx", "knowledge_item", ("base_id", "updated_at")),
    ("job_queue_updated_idx", "job", ("queue", "updated_at")),
    ("job_finished_idx", "job", ("finished_at",)),
)


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("item_tombstone"):
        op.create_table(
            "item_tombstone",
            sa.Column("base_id", sa.String(36), nullable=False),
            sa.Column("item_id", sa.String(36), nullable=False),
            sa.Column("deleted_at", sa.BigInteger, nullable=False),
        )
        op.create_index(
            "item_tombstone_base_deleted_idx", "item_tombstone", ["base_id", "deleted_at"]
        )
        op.create_index("item_tombstone_deleted_idx", "item_tombstone", ["deleted_at"])
    for name, table, columns in INDEXES:
        existing = {i["name"] for i in inspector.get_indexes(table)}
        if name not in existing:
            op.create_index(name, table, list(columns))


def downgrade() -> None:
    for name, table, _ in INDEXES:
        op.drop_index(name, table_name=table)
    op.drop_table("item_tombstone")
