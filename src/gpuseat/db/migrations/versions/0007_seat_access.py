"""Seat delivery: how to connect (structured access) and the last readiness check, kept on the seat.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Two nullable JSON columns on seats (existing rows keep working: no access, never checked)."""
    with op.batch_alter_table("seats") as batch:
        batch.add_column(sa.Column("access", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("readiness", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Drop the two columns."""
    with op.batch_alter_table("seats") as batch:
        batch.drop_column("readiness")
        batch.drop_column("access")
