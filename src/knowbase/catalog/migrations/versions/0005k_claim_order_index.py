"""Claim order index: ``job (status, run_at, created_at, id)``.

A claim reads due pending jobs in this order a page at a time and stops once it has enough
(``jobs/manager.py``); without the index every claim sorted the whole backlog, which made a
100k-file import's claims cost the size of its queue. 0001 builds the schema module as it is
now, so on a fresh database the index exists already: the step checks first.

Revision ID: 0005k
Revises: 0004e
"""

import sqlalchemy as sa
from alembic import op

revision = "0005k"
down_revision = "0004e"
branch_labels = None
depends_on = None

NAME = "job_pending_order_idx"


def upgrade() -> None:
    existing = {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("job")}
    if NAME not in existing:
        op.create_index(NAME, "job", ["status", "run_at", "created_at", "id"])


def downgrade() -> None:
    op.drop_index(NAME, table_name="job")
