"""Courses: per-course roster and seats, assignments with partial unique indexes, access tokens, events.

Existing participants and seats (written by ``monitor --seats``) move into a course created here,
key ``default``; samples, aggregates and alerts keep their ids. A participant holding more than one
open assignment (possible before) keeps the newest; the others are closed, so the new indexes hold.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op
from alembic.operations import BatchOperations

from gpuseat.db.migrations.columns import at, foreign_key, ident, pk

revision = "0004"  # created 2026-12-02
down_revision = "0003"

OPEN = sa.text("valid_to IS NULL")
DEFAULT_COURSE = "default"

_SQLITE_TRIGGERS = (
    "CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events "
    "BEGIN SELECT RAISE(ABORT, 'events are append-only'); END",
    "CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events "
    "BEGIN SELECT RAISE(ABORT, 'events are append-only'); END",
)
_PG_TRIGGERS = (
    "CREATE FUNCTION gpuseat_events_append_only() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'events are append-only'; END $$",
    "CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events "
    "FOR EACH ROW EXECUTE FUNCTION gpuseat_events_append_only()",
)


def upgrade() -> None:
    """Add courses and make the roster per course, keeping every existing row."""
    bind = op.get_bind()
    now = datetime.now(UTC)
    courses = op.create_table(
        "courses",
        ident(),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("source_text", sa.Text(), nullable=True),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("starts_on", sa.Date(), nullable=True),
        sa.Column("ends_on", sa.Date(), nullable=True),
        sa.Column("plan_option", sa.JSON(), nullable=True),
        sa.Column("survey_state", sa.String(32), nullable=True),
        at("created_at", nullable=False),
        at("updated_at", nullable=False),
        pk("courses"),
        sa.UniqueConstraint("key", name="uq_courses_key"),
    )
    has_rows = any(
        bind.execute(sa.text(f"SELECT 1 FROM {table} LIMIT 1")).first() for table in ("participants", "seats")
    )
    default_id = None
    if has_rows:
        bind.execute(
            courses.insert().values(
                key=DEFAULT_COURSE,
                name="Seats from the monitor's seats file",
                summary={},
                timezone="UTC",
                created_at=now,
                updated_at=now,
            )
        )
        default_id = bind.execute(sa.text("SELECT id FROM courses WHERE key = :k"), {"k": DEFAULT_COURSE}).scalar()

    # participants: per course, with group, SSH key and times
    op.add_column("participants", sa.Column("course_id", sa.Integer(), nullable=True))
    op.add_column("participants", sa.Column("group_name", sa.String(128), nullable=True))
    op.add_column("participants", sa.Column("ssh_key", sa.Text(), nullable=True))
    op.add_column("participants", at("created_at", nullable=True))
    op.add_column("participants", at("updated_at", nullable=True))
    if default_id is not None:
        bind.execute(
            sa.text("UPDATE participants SET course_id = :c, created_at = :t, updated_at = :t"),
            {"c": default_id, "t": now},
        )
    with op.batch_alter_table("participants") as batch:
        batch.alter_column("course_id", existing_type=sa.Integer(), nullable=False)
        batch.drop_constraint("uq_participants_key", type_="unique")
        batch.create_unique_constraint("uq_participants_course_key", ["course_id", "key"])
        batch.create_unique_constraint("uq_participants_course_email", ["course_id", "email"])
        batch.create_foreign_key(
            "fk_participants_course_id_courses", "courses", ["course_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index("ix_participants_course_id", ["course_id"])

    # seats: per course, kind, engine, state, connect string; device UUID optional until provisioned
    op.add_column("seats", sa.Column("course_id", sa.Integer(), nullable=True))
    op.add_column("seats", sa.Column("kind", sa.String(16), nullable=True))
    op.add_column("seats", sa.Column("memory_gb", sa.Float(), nullable=True))
    op.add_column("seats", sa.Column("groups", sa.JSON(), nullable=True))
    op.add_column("seats", sa.Column("engine", sa.String(16), nullable=True))
    op.add_column("seats", sa.Column("engine_ref", sa.String(512), nullable=True))
    op.add_column("seats", sa.Column("state", sa.String(16), nullable=True))
    op.add_column("seats", sa.Column("state_reason", sa.Text(), nullable=True))
    op.add_column("seats", at("state_at", nullable=True))
    op.add_column("seats", sa.Column("connect", sa.Text(), nullable=True))
    op.add_column("seats", at("created_at", nullable=True))
    if default_id is not None:
        bind.execute(
            sa.text(
                "UPDATE seats SET course_id = :c, groups = '[]', engine = 'manual', state = 'running', "
                "state_reason = 'from the monitor seats file', state_at = :t, created_at = :t, "
                "kind = CASE WHEN device_uuid LIKE 'MIG-%' THEN 'mig' ELSE 'gpu' END"
            ),
            {"c": default_id, "t": now},
        )
    with op.batch_alter_table("seats") as batch:
        for col, type_ in (
            ("course_id", sa.Integer()),
            ("kind", sa.String(16)),
            ("groups", sa.JSON()),
            ("engine", sa.String(16)),
            ("state", sa.String(16)),
        ):
            batch.alter_column(col, existing_type=type_, nullable=False)
        batch.alter_column("device_uuid", existing_type=sa.String(96), nullable=True)
        batch.drop_constraint("uq_seats_key", type_="unique")
        batch.drop_constraint("uq_seats_device_uuid", type_="unique")
        batch.create_unique_constraint("uq_seats_course_key", ["course_id", "key"])
        batch.create_unique_constraint("uq_seats_course_device_uuid", ["course_id", "device_uuid"])
        batch.create_foreign_key("fk_seats_course_id_courses", "courses", ["course_id"], ["id"], ondelete="CASCADE")
        batch.create_index("ix_seats_course_id", ["course_id"])

    # assignments: how the seat was taken, why it ended; one open assignment per seat and participant
    op.add_column("assignments", sa.Column("mode", sa.String(16), nullable=False, server_default="assigned"))
    op.add_column("assignments", sa.Column("ended_by", sa.String(32), nullable=True))
    for column in ("seat_id", "participant_id"):
        bind.execute(
            sa.text(
                f"UPDATE assignments SET valid_to = :t, ended_by = 'migration' WHERE valid_to IS NULL "
                f"AND id NOT IN (SELECT max(id) FROM assignments WHERE valid_to IS NULL GROUP BY {column})"
            ),
            {"t": now},
        )
    op.create_index(
        "uq_assignments_open_seat", "assignments", ["seat_id"], unique=True, sqlite_where=OPEN, postgresql_where=OPEN
    )
    op.create_index(
        "uq_assignments_open_participant",
        "assignments",
        ["participant_id"],
        unique=True,
        sqlite_where=OPEN,
        postgresql_where=OPEN,
    )

    op.create_table(
        "access_tokens",
        ident(),
        *foreign_key("access_tokens", "participant_id"),
        sa.Column("token_hash", sa.String(64), nullable=False),
        at("created_at", nullable=False),
        at("last_used_at", nullable=True),
        at("revoked_at", nullable=True),
        pk("access_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_access_tokens_token_hash"),
    )
    op.create_index("ix_access_tokens_participant_id", "access_tokens", ["participant_id"])

    op.create_table(
        "events",
        ident(big=True),
        at("at", nullable=False),
        sa.Column("course_key", sa.String(64), nullable=True),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("participant", sa.String(128), nullable=True),
        sa.Column("seat", sa.String(128), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=True),
        pk("events"),
    )
    op.create_index("ix_events_course_at", "events", ["course_key", "at"])
    for statement in _PG_TRIGGERS if bind.dialect.name == "postgresql" else _SQLITE_TRIGGERS:
        bind.execute(sa.text(statement))
    if default_id is not None:
        bind.execute(
            sa.text(
                "INSERT INTO events (at, course_key, actor, action, detail) "
                "VALUES (:t, :c, 'migration 0004', 'course.create', NULL)"
            ),
            {"t": now, "c": DEFAULT_COURSE},
        )


def downgrade() -> None:
    """Back to one global roster (fails on purpose if two courses share a participant or seat key)."""
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        bind.execute(sa.text("DROP TRIGGER IF EXISTS events_append_only ON events"))
        bind.execute(sa.text("DROP FUNCTION IF EXISTS gpuseat_events_append_only()"))
    op.drop_table("events")
    op.drop_table("access_tokens")
    op.drop_index("uq_assignments_open_participant", table_name="assignments")
    op.drop_index("uq_assignments_open_seat", table_name="assignments")
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("ended_by")
        batch.drop_column("mode")
    bind.execute(sa.text("DELETE FROM seats WHERE device_uuid IS NULL"))
    with op.batch_alter_table("seats") as batch:
        _unscope(batch, "seats", per_course=("device_uuid", "key"), unique=("key", "device_uuid"))
        batch.alter_column("device_uuid", existing_type=sa.String(96), nullable=False)
        for col in (
            "created_at",
            "connect",
            "state_at",
            "state_reason",
            "state",
            "engine_ref",
            "engine",
            "groups",
            "memory_gb",
            "kind",
            "course_id",
        ):
            batch.drop_column(col)
    with op.batch_alter_table("participants") as batch:
        _unscope(batch, "participants", per_course=("email", "key"), unique=("key",))
        for col in ("updated_at", "created_at", "ssh_key", "group_name", "course_id"):
            batch.drop_column(col)
    op.drop_table("courses")


def _unscope(batch: BatchOperations, table: str, *, per_course: tuple[str, ...], unique: tuple[str, ...]) -> None:
    """Undo what :func:`upgrade` made ``table`` per course: its course index, foreign key and per-course
    unique keys go, and the global unique keys ``unique`` come back."""
    batch.drop_index(f"ix_{table}_course_id")
    batch.drop_constraint(f"fk_{table}_course_id_courses", type_="foreignkey")
    for column in per_course:
        batch.drop_constraint(f"uq_{table}_course_{column}", type_="unique")
    for column in unique:
        batch.create_unique_constraint(f"uq_{table}_{column}", [column])
