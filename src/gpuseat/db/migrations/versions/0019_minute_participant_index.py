"""An index on ``minute_aggregates (participant_id, minute)``.

A participant's page and the course report count each participant's own minutes (the monitor credits each
minute to whoever held the seat then), on every seat they held, not the history of the seat they hold now.
Without this index that read scanned every minute of every course: a day of one-minute rollups for 2,000
seats is 2.88 M rows.
"""

from __future__ import annotations

from gpuseat.db.migrations.columns import index_revision

revision = "0019"  # created 2026-12-07
down_revision = "0018"

upgrade, downgrade = index_revision(
    "ix_minute_aggregates_participant_id_minute", "minute_aggregates", ["participant_id", "minute"]
)
