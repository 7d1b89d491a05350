"""Seat taken: ``seats.taken``, kept by database triggers on ``assignments``, and an index of free seats.

``taken`` is true while the seat has an open assignment (``valid_to IS NULL``). The triggers keep it, on
every insert, update and delete of an assignment, whatever code path writes one, so the claim can see
"taken" on the seat row itself: on PostgreSQL a claim whose snapshot still saw a seat free re-checks the
seat row when it locks it (``FOR UPDATE SKIP LOCKED``) and moves on to the next seat instead of losing
the race at the unique index and starting over. The partial unique indexes on ``assignments`` stay the
last word on double assignments.

The archive triggers (0010) refuse updates of an archived course's seats; an update that flips ``taken``
is the assignments triggers' own (deleting an archived course deletes its open assignments) and passes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"  # created 2026-12-03
down_revision = "0010"

MESSAGE = "gpuseat: course is archived"  # as 0010
_ARCHIVED = "(SELECT archived_at FROM courses WHERE id = NEW.course_id)"

_PG_FUNCTION = """
CREATE OR REPLACE FUNCTION gpuseat_seat_taken() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.valid_to IS NULL THEN
        UPDATE seats SET taken = false WHERE id = OLD.seat_id AND taken;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.valid_to IS NULL THEN
        UPDATE seats SET taken = true WHERE id = NEW.seat_id AND NOT taken;
    END IF;
    RETURN NULL;
END
$$
"""
# an update matters when the assignment opens, closes or moves to another seat
_MOVED = "(OLD.seat_id <> NEW.seat_id OR (OLD.valid_to IS NULL) <> (NEW.valid_to IS NULL))"
_PG_TRIGGERS = {
    "gpuseat_taken_insert": "AFTER INSERT ON assignments FOR EACH ROW WHEN (NEW.valid_to IS NULL)",
    "gpuseat_taken_update": f"AFTER UPDATE ON assignments FOR EACH ROW WHEN {_MOVED}",
    "gpuseat_taken_delete": "AFTER DELETE ON assignments FOR EACH ROW WHEN (OLD.valid_to IS NULL)",
}
_FREE_OLD = "UPDATE seats SET taken = 0 WHERE id = OLD.seat_id AND taken;"
_TAKE_NEW = "UPDATE seats SET taken = 1 WHERE id = NEW.seat_id AND NOT taken;"
_SQLITE_TRIGGERS = {
    "gpuseat_taken_insert": f"AFTER INSERT ON assignments WHEN NEW.valid_to IS NULL BEGIN {_TAKE_NEW} END",
    "gpuseat_taken_update": (
        f"AFTER UPDATE ON assignments WHEN {_MOVED} BEGIN "
        f"UPDATE seats SET taken = 0 WHERE id = OLD.seat_id AND taken AND OLD.valid_to IS NULL; "
        f"UPDATE seats SET taken = 1 WHERE id = NEW.seat_id AND NOT taken AND NEW.valid_to IS NULL; END"
    ),
    "gpuseat_taken_delete": f"AFTER DELETE ON assignments WHEN OLD.valid_to IS NULL BEGIN {_FREE_OLD} END",
}


def upgrade() -> None:
    """Add the column, the archive rule that lets it change, the triggers and the index; fill it in."""
    postgres = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("seats", recreate="never") as batch:
        batch.add_column(sa.Column("taken", sa.Boolean(), server_default=sa.false(), nullable=False))
    if postgres:
        op.execute("DROP TRIGGER gpuseat_ro_seats ON seats")
        op.execute(
            "CREATE TRIGGER gpuseat_ro_seats BEFORE INSERT ON seats "
            "FOR EACH ROW EXECUTE FUNCTION gpuseat_refuse_archived()"
        )
        op.execute(
            "CREATE TRIGGER gpuseat_ro_seats_update BEFORE UPDATE ON seats FOR EACH ROW "
            "WHEN (NEW.taken IS NOT DISTINCT FROM OLD.taken) EXECUTE FUNCTION gpuseat_refuse_archived()"
        )
        op.execute(_PG_FUNCTION)
        for name, when in _PG_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {when} EXECUTE FUNCTION gpuseat_seat_taken()")
    else:
        op.execute("DROP TRIGGER gpuseat_ro_seats_update")
        op.execute(
            "CREATE TRIGGER gpuseat_ro_seats_update BEFORE UPDATE ON seats "
            f"WHEN NEW.taken IS OLD.taken AND {_ARCHIVED} IS NOT NULL BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
        )
        for name, body in _SQLITE_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {body}")
    op.execute(
        "UPDATE seats SET taken = true WHERE id IN (SELECT seat_id FROM assignments WHERE valid_to IS NULL)"
        if postgres
        else "UPDATE seats SET taken = 1 WHERE id IN (SELECT seat_id FROM assignments WHERE valid_to IS NULL)"
    )
    op.create_index(
        "ix_seats_free",
        "seats",
        ["course_id"],
        postgresql_where=sa.text("NOT taken"),
        sqlite_where=sa.text("NOT taken"),
    )


def downgrade() -> None:
    """Drop the index, the triggers and the column; the archive rule for seats is 0010's again."""
    op.drop_index("ix_seats_free", table_name="seats")
    if op.get_bind().dialect.name == "postgresql":
        for name in _PG_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON assignments")
        op.execute("DROP FUNCTION IF EXISTS gpuseat_seat_taken()")
        op.execute("DROP TRIGGER IF EXISTS gpuseat_ro_seats_update ON seats")
        op.execute("DROP TRIGGER IF EXISTS gpuseat_ro_seats ON seats")
        op.execute(
            "CREATE TRIGGER gpuseat_ro_seats BEFORE INSERT OR UPDATE ON seats "
            "FOR EACH ROW EXECUTE FUNCTION gpuseat_refuse_archived()"
        )
    else:
        for name in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute("DROP TRIGGER IF EXISTS gpuseat_ro_seats_update")
        op.execute(
            "CREATE TRIGGER gpuseat_ro_seats_update BEFORE UPDATE ON seats "
            f"WHEN {_ARCHIVED} IS NOT NULL BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
        )
    with op.batch_alter_table("seats", recreate="never") as batch:
        batch.drop_column("taken")
