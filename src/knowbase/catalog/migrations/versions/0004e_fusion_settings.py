"""Fusion settings per base: ``fusion`` (rrf | convex), ``fusion_alpha``, ``rrf_k``.

Bases made before this revision keep what they ran (the origin's RRF, k = 60, α = 0.5), so an
upgrade changes no ranking; new bases get the default picked with ``kb eval --sweep``
(``search/fusion.py``). 0001 builds the schema module as it is now, so on a fresh database the
columns exist already: every step checks first.

Revision ID: 0004e
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0004e"
down_revision = "0003y"
branch_labels = None
depends_on = None

NEW_BASES = "convex"  # = query.fusion.DEFAULT_METHOD when this revision was written


def _columns() -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns("knowledge_base")}


def upgrade() -> None:
    if "fusion" in _columns():
        return
    with op.batch_alter_table("knowledge_base") as batch:
        # existing rows take 'rrf' (what they ran before); the default then moves for new rows
        batch.add_column(sa.Column("fusion", sa.String(16), nullable=False, server_default="rrf"))
        batch.add_column(sa.Column("fusion_alpha", sa.Float, nullable=False, server_default="0.5"))
        batch.add_column(sa.Column("rrf_k", sa.Integer, nullable=False, server_default="60"))
    with op.batch_alter_table("knowledge_base") as batch:
        batch.alter_column("fusion", server_default=NEW_BASES, existing_type=sa.String(16))


def downgrade() -> None:
    with op.batch_alter_table("knowledge_base") as batch:
        batch.drop_column("rrf_k")
        batch.drop_column("fusion_alpha")
        batch.drop_column("fusion")
