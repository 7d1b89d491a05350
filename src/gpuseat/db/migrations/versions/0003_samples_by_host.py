"""Samples safe for many writers: one sample per device and second (a restarted replay is not stored twice).

Each monitor writes, rolls up and prunes only its own host's devices (``devices`` is already keyed by
host and UUID); this unique index lets every insert use ``ON CONFLICT DO NOTHING`` and the rollup
``ON CONFLICT DO UPDATE``. Duplicates left by older versions are removed first.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"  # created 2026-12-02
down_revision = "0001"


def upgrade() -> None:
    """Drop duplicate (device, second) samples, then make the pair unique."""
    op.execute(
        sa.text(
            "DELETE FROM samples WHERE id NOT IN "
            "(SELECT min_id FROM (SELECT MIN(id) AS min_id FROM samples GROUP BY device_id, ts) AS keep)"
        )
    )
    op.create_index("ux_samples_device_id_ts", "samples", ["device_id", "ts"], unique=True)


def downgrade() -> None:
    """Back to 0001's samples table."""
    op.drop_index("ux_samples_device_id_ts", table_name="samples")
