"""Alerts reference seats by id and belong to a course (seat keys are unique only within a course).

Existing alerts are carried over: an alert whose seat key names exactly one seat in the database gets
that seat's id and course; one whose key several courses use stays course-less (it cannot be placed),
as do GPU-lost alerts of GPUs no seat uses.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"  # created 2026-12-03
down_revision = "0005"


def upgrade() -> None:
    """Add ``alerts.seat_id`` and ``alerts.course_id`` and fill them from the seat keys."""
    with op.batch_alter_table("alerts") as batch:
        batch.add_column(sa.Column("seat_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("course_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_alerts_seat_id_seats", "seats", ["seat_id"], ["id"], ondelete="SET NULL")
        batch.create_foreign_key("fk_alerts_course_id_courses", "courses", ["course_id"], ["id"], ondelete="CASCADE")
    op.create_index("ix_alerts_course_id", "alerts", ["course_id"])
    op.create_index("ix_alerts_seat_id", "alerts", ["seat_id"])
    unique = "(SELECT count(*) FROM seats s WHERE s.key = alerts.seat) = 1"
    op.execute(
        "UPDATE alerts SET seat_id = (SELECT s.id FROM seats s WHERE s.key = alerts.seat), "
        "course_id = (SELECT s.course_id FROM seats s WHERE s.key = alerts.seat) "
        f"WHERE alerts.seat IS NOT NULL AND {unique}"
    )
    # GPU-lost alerts (no seat): the course of the seats on that GPU, when they are all of one course
    on_gpu = (
        "FROM seats s LEFT JOIN devices d ON d.uuid = s.device_uuid "
        "WHERE s.device_uuid = alerts.key OR d.parent_uuid = alerts.key"
    )
    op.execute(
        f"UPDATE alerts SET course_id = (SELECT min(s.course_id) {on_gpu}) "
        f"WHERE alerts.seat IS NULL AND (SELECT count(DISTINCT s.course_id) {on_gpu}) = 1"
    )


def downgrade() -> None:
    """Drop the two columns (the seat keys were kept)."""
    op.drop_index("ix_alerts_seat_id", table_name="alerts")
    op.drop_index("ix_alerts_course_id", table_name="alerts")
    with op.batch_alter_table("alerts") as batch:
        batch.drop_constraint("fk_alerts_course_id_courses", type_="foreignkey")
        batch.drop_constraint("fk_alerts_seat_id_seats", type_="foreignkey")
        batch.drop_column("course_id")
        batch.drop_column("seat_id")
