"""Alembic environment: the engine comes from ``config.attributes['engine']``."""

from __future__ import annotations

from alembic import context

from knowbase.catalog.schema import metadata

engine = context.config.attributes["engine"]
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
