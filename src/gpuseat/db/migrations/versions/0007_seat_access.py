"""Seat delivery: how to connect (structured access) and the last readiness check, kept on the seat."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"  # created 2026-12-03
down_revision = "0006"


def upgrade() -> None:
    """Two nullable JSON columns on seats (existing rows keep working: no access, never checked)."""
    with op.batch_alter_table("seats") as batch:
        for column in ("access", "readiness"):
            batch.add_column(sa.Column(column, sa.JSON(), nullable=True))


def downgrade() -> None:
    """Drop the two columns."""
    with op.batch_alter_table("seats") as batch:
        for column in ("readiness", "access"):
            batch.drop_column(column)
