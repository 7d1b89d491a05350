"""Participant self-service: seat requests (start, stop, restart, reset, a new key, the agent's own
stops) and the seat-hour ledger (top-ups and per-person quotas).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``seat_requests`` and ``seat_hours``."""
    op.create_table(
        "seat_requests",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("seat_key", sa.String(128), nullable=True),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name="fk_seat_requests_course_id_courses", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name="fk_seat_requests_participant_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_seat_requests"),
    )
    op.create_index("ix_seat_requests_course_state", "seat_requests", ["course_id", "state"])
    op.create_index("ix_seat_requests_participant_at", "seat_requests", ["participant_id", "requested_at"])
    op.create_table(
        "seat_hours",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("hours", sa.Float(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name="fk_seat_hours_course_id_courses", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name="fk_seat_hours_participant_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_seat_hours"),
    )
    op.create_index("ix_seat_hours_participant", "seat_hours", ["participant_id"])


def downgrade() -> None:
    """Drop what :func:`upgrade` made."""
    op.drop_index("ix_seat_hours_participant", table_name="seat_hours")
    op.drop_table("seat_hours")
    op.drop_index("ix_seat_requests_participant_at", table_name="seat_requests")
    op.drop_index("ix_seat_requests_course_state", table_name="seat_requests")
    op.drop_table("seat_requests")
