"""Alembic environment: runs on the connection gpuseat hands over (no alembic.ini at run time)."""

from __future__ import annotations

from alembic import context

from gpuseat.db.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
