"""Portal: surveys and their responses, organizer logins, shared portal settings; seat indexes on samples.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the portal's tables (nothing existing changes)."""
    op.create_table(
        "surveys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("template_key", sa.String(64), nullable=False),
        sa.Column("template_text", sa.Text(), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["course_id"], ["courses.id"], name="fk_surveys_course_id_courses", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_surveys"),
        sa.UniqueConstraint("course_id", name="uq_surveys_course_id"),
    )
    op.create_table(
        "survey_responses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("survey_id", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("answers", sa.JSON(), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["survey_id"], ["surveys.id"], name="fk_survey_responses_survey_id_surveys", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
            name="fk_survey_responses_participant_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_survey_responses"),
        sa.UniqueConstraint("survey_id", "participant_id", name="uq_survey_responses_survey_participant"),
    )
    op.create_index("ix_survey_responses_participant_id", "survey_responses", ["participant_id"])
    op.create_table(
        "portal_users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("password_hash", sa.String(256), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_portal_users"),
        sa.UniqueConstraint("username", name="uq_portal_users_username"),
    )
    op.create_index("ix_samples_seat_id_ts", "samples", ["seat_id", "ts"])
    op.create_index("ix_minute_aggregates_seat_id_minute", "minute_aggregates", ["seat_id", "minute"])
    op.create_table(
        "portal_settings",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_portal_settings"),
    )


def downgrade() -> None:
    """Drop the portal's tables."""
    op.drop_table("portal_settings")
    op.drop_index("ix_minute_aggregates_seat_id_minute", table_name="minute_aggregates")
    op.drop_index("ix_samples_seat_id_ts", table_name="samples")
    op.drop_table("portal_users")
    op.drop_index("ix_survey_responses_participant_id", table_name="survey_responses")
    op.drop_table("survey_responses")
    op.drop_table("surveys")
