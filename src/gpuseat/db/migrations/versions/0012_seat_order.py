"""Free seats in the claim's preference order: two partial indexes, so a claim looks the best seat up.

The claim (``gpuseat.store.claims``) ranks suitable free seats as ``core.seating.preference`` does: own
hardware before cloud, reserved for the participant's group before open, smallest memory, by key. It used
to sort every free seat of the course for every claim (on SQLite under the write lock). A suitable seat is
either reserved for the participant's group or open (reserved for nobody), so the claim now takes the
better of two picks:

* ``ix_seats_free_order``: the free open seats of a course in preference order, ``(course_id,
  kind = 'cloud', memory_gb IS NULL, memory_gb, key)`` (``key COLLATE "C"`` on PostgreSQL, as the claim
  compares keys): the best open seat is the first suitable entry, a log-n lookup;
* ``ix_seats_free_reserved``: the free reserved seats of a course (few), sorted by the claim.
"""

from __future__ import annotations

from alembic import op

revision = "0012"  # created 2027-01-18
down_revision = "0011"

OPEN = "NOT taken AND json_array_length(groups) = 0"
RESERVED = "NOT taken AND json_array_length(groups) > 0"


def upgrade() -> None:
    """Create both indexes (the rows are indexed as they are: nothing to fill in)."""
    collate = ' COLLATE "C"' if op.get_bind().dialect.name == "postgresql" else ""
    op.execute(
        "CREATE INDEX ix_seats_free_order ON seats "
        f"(course_id, (kind = 'cloud'), (memory_gb IS NULL), memory_gb, key{collate}) WHERE {OPEN}"
    )
    op.execute(f"CREATE INDEX ix_seats_free_reserved ON seats (course_id) WHERE {RESERVED}")


def downgrade() -> None:
    """Drop both indexes."""
    op.execute("DROP INDEX ix_seats_free_reserved")
    op.execute("DROP INDEX ix_seats_free_order")
