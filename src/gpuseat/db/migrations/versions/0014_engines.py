"""Engines and agents: per-course engine settings, agent leases and status, the access engines hold,
deletions waiting for revocation, and (PostgreSQL) a NOTIFY on every new events row to wake agents.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpuseat.db.migrations.columns import at, foreign_key, ident, pk

revision = "0014"  # created 2026-12-06
down_revision = "0013"

CHANNEL = "gpuseat_events"
# NOTIFY makes committing transactions take turns on PostgreSQL's notification queue (16 concurrent seat
# claims went from ~830/s to ~260/s with a NOTIFY each): notify only while some agent holds a lease, i.e.
# listens; with none, agents are not running and nothing needs waking.
_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION gpuseat_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM agent_leases WHERE expires_at > extract(epoch FROM clock_timestamp())) THEN
        PERFORM pg_notify('{CHANNEL}', NEW.id::text);
    END IF;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    """Create the five tables; on PostgreSQL, the events trigger that wakes listening agents."""
    op.create_table(
        "engine_settings",
        ident(),
        *foreign_key("engine_settings", "course_id"),
        sa.Column("engine", sa.String(32), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        at("updated_at", nullable=False),
        pk("engine_settings"),
        sa.UniqueConstraint("course_id", "engine", name="uq_engine_settings_course_engine"),
    )
    op.create_table(
        "agent_leases",
        sa.Column("name", sa.String(160), nullable=False),
        sa.Column("holder", sa.String(160), nullable=False),
        sa.Column("acquired_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        pk("agent_leases", "name"),
    )
    op.create_table(
        "agent_status",
        sa.Column("name", sa.String(160), nullable=False),
        sa.Column("holder", sa.String(160), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("cursor", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        at("last_apply_at", nullable=True),
        at("last_resync_at", nullable=True),
        sa.Column("pending", sa.Integer(), nullable=False),
        sa.Column("failed", sa.JSON(), nullable=False),
        at("updated_at", nullable=False),
        pk("agent_status", "name"),
    )
    op.create_table(
        "engine_holdings",
        ident(),
        sa.Column("course_key", sa.String(64), nullable=False),
        sa.Column("engine", sa.String(32), nullable=False),
        sa.Column("host", sa.String(256), nullable=False),
        sa.Column("what", sa.String(32), nullable=False),
        sa.Column("login", sa.String(64), nullable=False),
        sa.Column("participant", sa.String(128), nullable=True),
        sa.Column("seat", sa.String(128), nullable=True),
        at("updated_at", nullable=False),
        pk("engine_holdings"),
    )
    op.create_index("ix_engine_holdings_course_key", "engine_holdings", ["course_key"])
    op.create_table(
        "course_deletions",
        sa.Column("course_key", sa.String(64), nullable=False),
        sa.Column("export_path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        at("requested_at", nullable=False),
        pk("course_deletions", "course_key"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(
            "CREATE TRIGGER gpuseat_events_notify AFTER INSERT ON events FOR EACH ROW "
            "EXECUTE FUNCTION gpuseat_events_notify()"
        )


def downgrade() -> None:
    """Drop what :func:`upgrade` made."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS gpuseat_events_notify ON events")
        op.execute("DROP FUNCTION IF EXISTS gpuseat_events_notify()")
    op.drop_table("course_deletions")
    op.drop_index("ix_engine_holdings_course_key", table_name="engine_holdings")
    op.drop_table("engine_holdings")
    op.drop_table("agent_status")
    op.drop_table("agent_leases")
    op.drop_table("engine_settings")
