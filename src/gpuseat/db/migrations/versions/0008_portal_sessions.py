"""Portal: server-side organizer sessions (so logout and a new password end them at once)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpuseat.db.migrations.columns import at, pk

revision = "0008"  # created 2026-12-03
down_revision = "0007"


def upgrade() -> None:
    """Create ``portal_sessions`` (nothing existing changes; old signed cookies simply stop working)."""
    op.create_table(
        "portal_sessions",
        sa.Column("id_hash", sa.String(64), nullable=False),
        sa.Column("username", sa.String(64), nullable=False),
        at("created_at", nullable=False),
        at("expires_at", nullable=False),
        pk("portal_sessions", "id_hash"),
    )
    op.create_index("ix_portal_sessions_username", "portal_sessions", ["username"])


def downgrade() -> None:
    """Drop ``portal_sessions``."""
    op.drop_index("ix_portal_sessions_username", table_name="portal_sessions")
    op.drop_table("portal_sessions")
