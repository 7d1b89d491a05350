"""An assignment never ends before it starts: the database refuses ``valid_to < valid_from``.

The store takes the time of a new or closed assignment as ``max(now, the course's last event time)``
(``gpuseat.store.rows._clock``), so a clock that steps back (an NTP correction, a VM restored from a
snapshot) cannot make history run backwards. This is the last guard behind that, whatever code path
writes:

* PostgreSQL: ``CHECK (valid_to IS NULL OR valid_to >= valid_from)`` (``ck_assignments_interval``);
* SQLite: adding a CHECK to a table means rebuilding it (and its triggers: 0010's archive rule, 0011's
  ``taken``), so two triggers refuse such an insert or update instead, comparing the times as
  ``julianday()`` (rows written by hand may lack the microseconds SQLAlchemy writes), and as text
  where that is too coarse to tell.

Rows a stepped clock already stored backwards are closed at their start (``valid_to = valid_from``)
first, archived courses' rows included.
"""

from __future__ import annotations

from alembic import op

revision = "0013"  # created 2026-12-06
down_revision = "0012"

MESSAGE = "gpuseat: an assignment cannot end before it starts"
CONSTRAINT = "ck_assignments_interval"
_BACKWARDS_PG = "valid_to IS NOT NULL AND valid_to < valid_from"
# julianday() resolves about 20 µs; closer times written alike (same length) compare as text
_BACKWARDS_SQLITE = (
    "NEW.valid_to IS NOT NULL AND (julianday(NEW.valid_to) < julianday(NEW.valid_from) "
    "OR (julianday(NEW.valid_to) = julianday(NEW.valid_from) "
    "AND length(NEW.valid_to) = length(NEW.valid_from) AND NEW.valid_to < NEW.valid_from))"
)
# 0010's archive rule for assignments on SQLite (dropped for the repair of old rows, then made again)
_RO_UPDATE = (
    "CREATE TRIGGER gpuseat_ro_assignments_update BEFORE UPDATE ON assignments "
    "WHEN (SELECT c.archived_at FROM seats s JOIN courses c ON c.id = s.course_id WHERE s.id = NEW.seat_id) "
    "IS NOT NULL BEGIN SELECT RAISE(ABORT, 'gpuseat: course is archived'); END"
)


def upgrade() -> None:
    """Close backwards rows at their start, then add the guard."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE assignments DISABLE TRIGGER gpuseat_ro_assignments")
        op.execute(f"UPDATE assignments SET valid_to = valid_from WHERE {_BACKWARDS_PG}")
        op.execute("ALTER TABLE assignments ENABLE TRIGGER gpuseat_ro_assignments")
        op.execute(
            f"ALTER TABLE assignments ADD CONSTRAINT {CONSTRAINT} CHECK (valid_to IS NULL OR valid_to >= valid_from)"
        )
        return
    op.execute("DROP TRIGGER IF EXISTS gpuseat_ro_assignments_update")
    op.execute("UPDATE assignments SET valid_to = valid_from WHERE " + _BACKWARDS_SQLITE.replace("NEW.", ""))
    op.execute(_RO_UPDATE)
    for verb in ("INSERT", "UPDATE"):
        op.execute(
            f"CREATE TRIGGER gpuseat_interval_{verb.lower()} BEFORE {verb} ON assignments "
            f"WHEN {_BACKWARDS_SQLITE} BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
        )


def downgrade() -> None:
    """Drop the guard (the repaired rows stay closed at their start)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE assignments DROP CONSTRAINT IF EXISTS {CONSTRAINT}")
        return
    for verb in ("insert", "update"):
        op.execute(f"DROP TRIGGER IF EXISTS gpuseat_interval_{verb}")
