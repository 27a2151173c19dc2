"""A base may choose the image-caption processor: ``file_processor_id`` ``caption:profile:model``.

The CHECK allowed only ``'tesseract'``; it now also allows ``caption:<profile>:<model>`` (the
vision endpoint's profile in config.toml and its model, like an embedding id), and the column
grows from 32 to 255 characters (PostgreSQL enforces the length; model names are long). No row
changes. 0001 builds the schema module as it is now, so on a fresh database the new CHECK is
there already: the step checks first.

Revision ID: 0006c
Revises: 0005k
"""

import sqlalchemy as sa
from alembic import op

revision = "0006c"
down_revision = "0005k"
branch_labels = None
depends_on = None

NAME = "knowledge_base_processor_check"
OLD = "file_processor_id IS NULL OR file_processor_id IN ('tesseract')"
NEW = (
    "file_processor_id IS NULL OR file_processor_id = 'tesseract'"
    " OR file_processor_id LIKE 'caption\\:_%\\:_%'"
)


def _check_text() -> str:
    for check in sa.inspect(op.get_bind()).get_check_constraints("knowledge_base"):
        if check["name"] == NAME:
            return str(check["sqltext"])
    return ""


def upgrade() -> None:
    if "caption" in _check_text():
        return
    with op.batch_alter_table("knowledge_base") as batch:
        batch.drop_constraint(NAME, type_="check")
        batch.alter_column(
            "file_processor_id",
            type_=sa.String(255),
            existing_type=sa.String(32),
            existing_nullable=True,
        )
        batch.create_check_constraint(NAME, NEW)


def downgrade() -> None:
    # Caption bases fall back to no processor: the old CHECK cannot hold their value.
    op.execute(
        "UPDATE knowledge_base SET file_processor_id = NULL"
        " WHERE file_processor_id LIKE 'caption:%'"
    )
    with op.batch_alter_table("knowledge_base") as batch:
        batch.drop_constraint(NAME, type_="check")
        batch.alter_column(
            "file_processor_id",
            type_=sa.String(32),
            existing_type=sa.String(255),
            existing_nullable=True,
        )
        batch.create_check_constraint(NAME, OLD)
