"""Course store: roster (participants, seats, assignments), devices, samples, minute aggregates, alerts.

Revision ID: 0001
Revises:
Create Date: 2026-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the tables of the first course store."""
    op.create_table(
        "participants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("name", sa.String(256), nullable=True),
        sa.Column("unix_user", sa.String(64), nullable=True),
        sa.Column("email", sa.String(256), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_participants"),
        sa.UniqueConstraint("key", name="uq_participants_key"),
    )
    op.create_table(
        "seats",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("host", sa.String(256), nullable=True),
        sa.Column("device_uuid", sa.String(96), nullable=False),
        sa.Column("profile", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_seats"),
        sa.UniqueConstraint("key", name="uq_seats_key"),
        sa.UniqueConstraint("device_uuid", name="uq_seats_device_uuid"),
    )
    op.create_table(
        "assignments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("seat_id", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("valid_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["seat_id"], ["seats.id"], name="fk_assignments_seat_id_seats", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name="fk_assignments_participant_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_assignments"),
    )
    op.create_index("ix_assignments_seat_id", "assignments", ["seat_id"])
    op.create_index("ix_assignments_participant_id", "assignments", ["participant_id"])
    op.create_table(
        "devices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(256), nullable=False),
        sa.Column("uuid", sa.String(96), nullable=False),
        sa.Column("name", sa.String(256), nullable=True),
        sa.Column("parent_uuid", sa.String(96), nullable=True),
        sa.Column("profile", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_devices"),
        sa.UniqueConstraint("host", "uuid", name="uq_devices_host_uuid"),
    )
    op.create_table(
        "samples",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("ts", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("seat_id", sa.Integer(), nullable=True),
        sa.Column("participant_id", sa.Integer(), nullable=True),
        sa.Column("memory_used_mib", sa.Integer(), nullable=True),
        sa.Column("memory_total_mib", sa.Integer(), nullable=True),
        sa.Column("utilization_gpu", sa.SmallInteger(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("temperature_c", sa.SmallInteger(), nullable=True),
        sa.Column("processes", sa.SmallInteger(), nullable=False),
        sa.Column("foreign_processes", sa.SmallInteger(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], name="fk_samples_device_id_devices", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["seat_id"], ["seats.id"], name="fk_samples_seat_id_seats", ondelete="SET NULL"),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name="fk_samples_participant_id_participants",
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_samples"),
    )
    op.create_index("ix_samples_ts", "samples", ["ts"])
    op.create_table(
        "minute_aggregates",
        sa.Column("minute", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("seat_id", sa.Integer(), nullable=True),
        sa.Column("participant_id", sa.Integer(), nullable=True),
        sa.Column("samples", sa.SmallInteger(), nullable=False),
        sa.Column("active_samples", sa.SmallInteger(), nullable=False),
        sa.Column("memory_max_mib", sa.Integer(), nullable=True),
        sa.Column("memory_avg_mib", sa.Integer(), nullable=True),
        sa.Column("utilization_avg", sa.SmallInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.id"], name="fk_minute_aggregates_device_id_devices", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["seat_id"], ["seats.id"], name="fk_minute_aggregates_seat_id_seats", ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name="fk_minute_aggregates_participant_id_participants",
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("minute", "device_id", name="pk_minute_aggregates"),
    )
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("key", sa.String(256), nullable=False),
        sa.Column("seat", sa.String(128), nullable=True),
        sa.Column("participant", sa.String(128), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("raised_at", sa.Float(), nullable=False),
        sa.Column("cleared_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_alerts"),
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
