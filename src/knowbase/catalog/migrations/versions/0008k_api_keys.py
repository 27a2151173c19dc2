"""Scoped API keys: the ``api_key`` table, and who asked for each job (``job.by_key``,
``job.by_surface``).

A key is stored as the SHA-256 of its token; ``kb keys create`` shows the token once. The job
columns are null for jobs from before this revision (and for the CLI's and an open server's).

Revision ID: 0008k
Revises: 0007p
"""

import sqlalchemy as sa
from alembic import op

revision = "0008k"
down_revision = "0007p"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # 0001 builds the schema module as it is now, so a fresh database has all of it already.
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    if not inspector.has_table("api_key"):
        op.create_table(
            "api_key",
            sa.Column("name", sa.String(64), primary_key=True),
            sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
            sa.Column("access", sa.String(8), nullable=False),
            sa.Column("base_ids", sa.Text, nullable=True),
            sa.Column("created_at", sa.BigInteger, nullable=False),
            sa.Column("expires_at", sa.BigInteger, nullable=True),
            sa.Column("revoked_at", sa.BigInteger, nullable=True),
            sa.CheckConstraint("access IN ('read', 'write')", name="api_key_access_check"),
        )
    have = {c["name"] for c in inspector.get_columns("job")}
    with op.batch_alter_table("job") as batch:
        if "by_key" not in have:
            batch.add_column(sa.Column("by_key", sa.String(64), nullable=True))
        if "by_surface" not in have:
            batch.add_column(sa.Column("by_surface", sa.String(16), nullable=True))
    if "job_by_key_idx" not in {i["name"] for i in inspector.get_indexes("job")}:
        op.create_index("job_by_key_idx", "job", ["by_key", "created_at"])


def downgrade() -> None:
    op.drop_index("job_by_key_idx", table_name="job")
    with op.batch_alter_table("job") as batch:
        batch.drop_column("by_surface")
        batch.drop_column("by_key")
    op.drop_table("api_key")
