"""Participant self-service: seat requests (start, stop, restart, reset, a new key, the agent's own
stops) and the seat-hour ledger (top-ups and per-person quotas).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpuseat.db.migrations.columns import at, foreign_key, ident, pk

revision = "0015"  # created 2026-12-06
down_revision = "0014"


def upgrade() -> None:
    """Create ``seat_requests`` and ``seat_hours``."""
    op.create_table(
        "seat_requests",
        ident(big=True),
        *foreign_key("seat_requests", "course_id"),
        *foreign_key("seat_requests", "participant_id"),
        sa.Column("seat_key", sa.String(128), nullable=True),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("actor", sa.String(128), nullable=False),
        at("requested_at", nullable=False),
        at("done_at", nullable=True),
        pk("seat_requests"),
    )
    op.create_index("ix_seat_requests_course_state", "seat_requests", ["course_id", "state"])
    op.create_index("ix_seat_requests_participant_at", "seat_requests", ["participant_id", "requested_at"])
    op.create_table(
        "seat_hours",
        ident(),
        *foreign_key("seat_hours", "course_id"),
        *foreign_key("seat_hours", "participant_id"),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("hours", sa.Float(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("actor", sa.String(128), nullable=False),
        at("at", nullable=False),
        pk("seat_hours"),
    )
    op.create_index("ix_seat_hours_participant", "seat_hours", ["participant_id"])


def downgrade() -> None:
    """Drop what :func:`upgrade` made."""
    op.drop_index("ix_seat_hours_participant", table_name="seat_hours")
    op.drop_table("seat_hours")
    op.drop_index("ix_seat_requests_participant_at", table_name="seat_requests")
    op.drop_index("ix_seat_requests_course_state", table_name="seat_requests")
    op.drop_table("seat_requests")
