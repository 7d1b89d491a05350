"""Course store: roster (participants, seats, assignments), devices, samples, minute aggregates, alerts."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpuseat.db.migrations.columns import at, foreign_key, ident, pk

revision = "0001"  # created 2026-01-01
down_revision = None


def upgrade() -> None:
    """Create the tables of the first course store."""
    op.create_table(
        "participants",
        ident(),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("name", sa.String(256), nullable=True),
        sa.Column("unix_user", sa.String(64), nullable=True),
        sa.Column("email", sa.String(256), nullable=True),
        pk("participants"),
        sa.UniqueConstraint("key", name="uq_participants_key"),
    )
    op.create_table(
        "seats",
        ident(),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("host", sa.String(256), nullable=True),
        sa.Column("device_uuid", sa.String(96), nullable=False),
        sa.Column("profile", sa.String(64), nullable=True),
        pk("seats"),
        sa.UniqueConstraint("key", name="uq_seats_key"),
        sa.UniqueConstraint("device_uuid", name="uq_seats_device_uuid"),
    )
    op.create_table(
        "assignments",
        ident(),
        *foreign_key("assignments", "seat_id"),
        *foreign_key("assignments", "participant_id"),
        at("valid_from", nullable=False),
        at("valid_to", nullable=True),
        pk("assignments"),
    )
    op.create_index("ix_assignments_seat_id", "assignments", ["seat_id"])
    op.create_index("ix_assignments_participant_id", "assignments", ["participant_id"])
    op.create_table(
        "devices",
        ident(),
        sa.Column("host", sa.String(256), nullable=False),
        sa.Column("uuid", sa.String(96), nullable=False),
        sa.Column("name", sa.String(256), nullable=True),
        sa.Column("parent_uuid", sa.String(96), nullable=True),
        sa.Column("profile", sa.String(64), nullable=True),
        pk("devices"),
        sa.UniqueConstraint("host", "uuid", name="uq_devices_host_uuid"),
    )
    op.create_table(
        "samples",
        ident(big=True),
        sa.Column("ts", sa.Integer(), nullable=False),
        *foreign_key("samples", "device_id"),
        *foreign_key("samples", "seat_id", nullable=True, ondelete="SET NULL"),
        *foreign_key("samples", "participant_id", nullable=True, ondelete="SET NULL"),
        sa.Column("memory_used_mib", sa.Integer(), nullable=True),
        sa.Column("memory_total_mib", sa.Integer(), nullable=True),
        sa.Column("utilization_gpu", sa.SmallInteger(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("temperature_c", sa.SmallInteger(), nullable=True),
        sa.Column("processes", sa.SmallInteger(), nullable=False),
        sa.Column("foreign_processes", sa.SmallInteger(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        pk("samples"),
    )
    op.create_index("ix_samples_ts", "samples", ["ts"])
    op.create_table(
        "minute_aggregates",
        sa.Column("minute", sa.Integer(), nullable=False),
        *foreign_key("minute_aggregates", "device_id"),
        *foreign_key("minute_aggregates", "seat_id", nullable=True, ondelete="SET NULL"),
        *foreign_key("minute_aggregates", "participant_id", nullable=True, ondelete="SET NULL"),
        sa.Column("samples", sa.SmallInteger(), nullable=False),
        sa.Column("active_samples", sa.SmallInteger(), nullable=False),
        sa.Column("memory_max_mib", sa.Integer(), nullable=True),
        sa.Column("memory_avg_mib", sa.Integer(), nullable=True),
        sa.Column("utilization_avg", sa.SmallInteger(), nullable=True),
        pk("minute_aggregates", "minute", "device_id"),
    )
    op.create_table(
        "alerts",
        ident(),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("key", sa.String(256), nullable=False),
        sa.Column("seat", sa.String(128), nullable=True),
        sa.Column("participant", sa.String(128), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("raised_at", sa.Float(), nullable=False),
        sa.Column("cleared_at", sa.Float(), nullable=True),
        pk("alerts"),
    )


def downgrade() -> None:
    """Drop every table of the first course store."""
    for table in (
        "alerts",
        "minute_aggregates",
        "samples",
        "devices",
        "assignments",
        "seats",
        "participants",
    ):
        op.drop_table(table)
