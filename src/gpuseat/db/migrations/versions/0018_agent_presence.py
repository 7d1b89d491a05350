"""Every running agent of a lease, standbys too: ``agent_presence``, one row per lease name and holder.

``agent_status`` keeps one row per lease name (the leader's last pass); a standby writes it only while no
agent has, so ``gpuseat agent status`` could not show that a fail-over agent was alive. Each agent now writes
its own row (role, when it reported, when that report runs out: three lease periods later, on the database's
clock); rows past their time are not shown, and the next agent to report deletes them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpuseat.db.migrations.columns import pk

revision = "0018"  # created 2026-12-07
down_revision = "0017"


#: the columns in table order, none nullable (times: Unix seconds of the database's clock, as the leases')
COLUMNS = (
    ("name", sa.String(160)),
    ("holder", sa.String(160)),
    ("role", sa.String(16)),
    ("reported_at", sa.Float()),
    ("expires_at", sa.Float()),
)


def upgrade() -> None:
    """Create the table (no rows: running agents write theirs within a third of a lease period)."""
    columns = [sa.Column(name, type_, nullable=False) for name, type_ in COLUMNS]
    op.create_table("agent_presence", *columns, pk("agent_presence", "name", "holder"))


def downgrade() -> None:
    """Drop the table."""
    op.drop_table("agent_presence")
