"""Claim pair index: ``job (status, queue, kind, run_at, created_at, id)`` replaces 0005k's
``job (status, run_at, created_at, id)``.

A claim now finds the (queue, kind) pairs that have pending jobs by index seeks and reads each
pair's due jobs in claim order (``jobs/claims.py``). With the old order, a claim whose queue
was full paged past that queue's whole backlog to look for other queues' jobs: 12 ms a claim at
100k pending, the catalog's writer held. 0001 builds the schema module as it is now, so on a
fresh database the new index exists already (and 0005k made the old one): the step checks.

Revision ID: 0007p
Revises: 0006c
"""

import sqlalchemy as sa
from alembic import op

revision = "0007p"
down_revision = "0006c"
branch_labels = None
depends_on = None

OLD = "job_pending_order_idx"
NEW = "job_pending_pair_idx"


def _indexes() -> set[str]:
    return {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("job")}


def upgrade() -> None:
    existing = _indexes()
    if NEW not in existing:
        op.create_index(NEW, "job", ["status", "queue", "kind", "run_at", "created_at", "id"])
    if OLD in existing:
        op.drop_index(OLD, table_name="job")


def downgrade() -> None:
    existing = _indexes()
    if OLD not in existing:
        op.create_index(OLD, "job", ["status", "run_at", "created_at", "id"])
    if NEW in existing:
        op.drop_index(NEW, table_name="job")
