"""Portal: surveys and their responses, organizer logins, shared portal settings; seat indexes on samples."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpuseat.db.migrations.columns import at, foreign_key, ident, pk

revision = "0005"  # created 2026-12-02
down_revision = "0004"


def upgrade() -> None:
    """Create the portal's tables (nothing existing changes)."""
    op.create_table(
        "surveys",
        ident(),
        *foreign_key("surveys", "course_id"),
        sa.Column("template_key", sa.String(64), nullable=False),
        sa.Column("template_text", sa.Text(), nullable=False),
        at("opened_at", nullable=True),
        at("closed_at", nullable=True),
        pk("surveys"),
        sa.UniqueConstraint("course_id", name="uq_surveys_course_id"),
    )
    op.create_table(
        "survey_responses",
        ident(),
        *foreign_key("survey_responses", "survey_id"),
        *foreign_key("survey_responses", "participant_id"),
        sa.Column("answers", sa.JSON(), nullable=False),
        at("submitted_at", nullable=False),
        at("updated_at", nullable=False),
        pk("survey_responses"),
        sa.UniqueConstraint("survey_id", "participant_id", name="uq_survey_responses_survey_participant"),
    )
    op.create_index("ix_survey_responses_participant_id", "survey_responses", ["participant_id"])
    op.create_table(
        "portal_users",
        ident(),
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("password_hash", sa.String(256), nullable=False),
        at("updated_at", nullable=False),
        pk("portal_users"),
        sa.UniqueConstraint("username", name="uq_portal_users_username"),
    )
    op.create_index("ix_samples_seat_id_ts", "samples", ["seat_id", "ts"])
    op.create_index("ix_minute_aggregates_seat_id_minute", "minute_aggregates", ["seat_id", "minute"])
    op.create_table(
        "portal_settings",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        pk("portal_settings", "key"),
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
