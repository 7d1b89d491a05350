"""Course archive: ``courses.archived_at``, and triggers that refuse writes to an archived course.

An archived course is read-only: the database itself refuses inserts and updates of its participants,
seats, assignments, access tokens and survey rows (triggers), whatever code path tries them, the way
the partial unique indexes refuse a double assignment. Deleting an archived course stays possible.
"""

from __future__ import annotations

from alembic import op

from gpuseat.db.migrations.columns import at

revision = "0010"  # created 2026-12-03
down_revision = "0008"

MESSAGE = "gpuseat: course is archived"

# table → SQL (SQLite trigger WHEN clause) that finds the row's course archive time
_SQLITE_COURSE = {
    "participants": "(SELECT archived_at FROM courses WHERE id = NEW.course_id)",
    "seats": "(SELECT archived_at FROM courses WHERE id = NEW.course_id)",
    "surveys": "(SELECT archived_at FROM courses WHERE id = NEW.course_id)",
    "assignments": (
        "(SELECT c.archived_at FROM seats s JOIN courses c ON c.id = s.course_id WHERE s.id = NEW.seat_id)"
    ),
    "access_tokens": (
        "(SELECT c.archived_at FROM participants p JOIN courses c ON c.id = p.course_id "
        "WHERE p.id = NEW.participant_id)"
    ),
    "survey_responses": (
        "(SELECT c.archived_at FROM surveys v JOIN courses c ON c.id = v.course_id WHERE v.id = NEW.survey_id)"
    ),
}

_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION gpuseat_refuse_archived() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cid integer;
BEGIN
    IF TG_TABLE_NAME = 'courses' THEN
        IF OLD.archived_at IS NOT NULL AND NEW.archived_at IS NOT NULL THEN
            RAISE EXCEPTION '{MESSAGE}';
        END IF;
        RETURN NEW;
    ELSIF TG_TABLE_NAME IN ('participants', 'seats', 'surveys') THEN
        cid := NEW.course_id;
    ELSIF TG_TABLE_NAME = 'assignments' THEN
        SELECT course_id INTO cid FROM seats WHERE id = NEW.seat_id;
    ELSIF TG_TABLE_NAME = 'access_tokens' THEN
        SELECT course_id INTO cid FROM participants WHERE id = NEW.participant_id;
    ELSIF TG_TABLE_NAME = 'survey_responses' THEN
        SELECT course_id INTO cid FROM surveys WHERE id = NEW.survey_id;
    END IF;
    IF EXISTS (SELECT 1 FROM courses WHERE id = cid AND archived_at IS NOT NULL) THEN
        RAISE EXCEPTION '{MESSAGE}';
    END IF;
    RETURN NEW;
END
$$
"""


def upgrade() -> None:
    """Add the column and the triggers (existing courses stay writable)."""
    with op.batch_alter_table("courses") as batch:
        batch.add_column(at("archived_at", nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        for table in (*_SQLITE_COURSE, "courses"):
            op.execute(
                f"CREATE TRIGGER gpuseat_ro_{table} BEFORE INSERT OR UPDATE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION gpuseat_refuse_archived()"
            )
        return
    for table, course in _SQLITE_COURSE.items():
        for verb in ("INSERT", "UPDATE"):
            op.execute(
                f"CREATE TRIGGER gpuseat_ro_{table}_{verb.lower()} BEFORE {verb} ON {table} "
                f"WHEN {course} IS NOT NULL BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
            )
    op.execute(
        "CREATE TRIGGER gpuseat_ro_courses_update BEFORE UPDATE ON courses "
        "WHEN OLD.archived_at IS NOT NULL AND NEW.archived_at IS NOT NULL "
        f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
    )


def downgrade() -> None:
    """Drop the triggers and the column."""
    if op.get_bind().dialect.name == "postgresql":
        for table in (*_SQLITE_COURSE, "courses"):
            op.execute(f"DROP TRIGGER IF EXISTS gpuseat_ro_{table} ON {table}")
        op.execute("DROP FUNCTION IF EXISTS gpuseat_refuse_archived()")
    else:
        for table in _SQLITE_COURSE:
            for verb in ("insert", "update"):
                op.execute(f"DROP TRIGGER IF EXISTS gpuseat_ro_{table}_{verb}")
        op.execute("DROP TRIGGER IF EXISTS gpuseat_ro_courses_update")
    with op.batch_alter_table("courses") as batch:
        batch.drop_column("archived_at")
