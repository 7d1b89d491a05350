"""Portal: server-side organizer sessions (so logout and a new password end them at once).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``portal_sessions`` (nothing existing changes; old signed cookies simply stop working)."""
    op.create_table(
        "portal_sessions",
        sa.Column("id_hash", sa.String(64), nullable=False),
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id_hash", name="pk_portal_sessions"),
    )
    op.create_index("ix_portal_sessions_username", "portal_sessions", ["username"])


def downgrade() -> None:
    """Drop ``portal_sessions``."""
    op.drop_index("ix_portal_sessions_username", table_name="portal_sessions")
    op.drop_table("portal_sessions")
