"""The course database schema (SQLAlchemy 2): courses, roster, seats, assignments, access tokens,
events, and the monitor's samples, one-minute aggregates and alerts.

Rows that grow with time (``samples``, ``minute_aggregates``) hold only small integers and
foreign keys, so a 15-day, 16-seat course stays a few tens of MB. The migration in
``migrations/versions`` creates exactly these tables; a test compares the two.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base with fixed constraint names (so migrations are stable across engines)."""

    metadata = MetaData(naming_convention=NAMING)


OPEN = text("valid_to IS NULL")  # the predicate of the partial unique indexes on assignments


class CourseRecord(Base):
    """One course: its file (text and parsed summary), dates, time zone, chosen plan option."""

    __tablename__ = "courses"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(256))
    source_text: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)
    timezone: Mapped[str] = mapped_column(String(64))
    starts_on: Mapped[date | None] = mapped_column(Date)
    ends_on: Mapped[date | None] = mapped_column(Date)
    plan_option: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    survey_state: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # set by ``course archive``: the course is read-only from then on (triggers refuse writes, migration 0010)
    archived_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # the course file's own offers files, ``[{"name": as the file names it, "text": its text}]`` in the file's
    # order, so that a re-plan of the stored course needs no file on disk (migration 0017); None: it names none
    offers_files: Mapped[list[dict[str, str]] | None] = mapped_column(JSON)


#: the model's name before it became ``CourseRecord`` (``Course`` is the course *file*,
#: :class:`gpuseat.core.course.Course`); kept so code written against the old name still imports
Course = CourseRecord


class Participant(Base):
    """A course participant; ``key`` (and ``email``) are unique within the course."""

    __tablename__ = "participants"
    __table_args__ = (
        UniqueConstraint("course_id", "key", name="uq_participants_course_key"),
        UniqueConstraint("course_id", "email", name="uq_participants_course_email"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(String(128))
    name: Mapped[str | None] = mapped_column(String(256))
    unix_user: Mapped[str | None] = mapped_column(String(64))
    email: Mapped[str | None] = mapped_column(String(256))
    group_name: Mapped[str | None] = mapped_column(String(128))
    ssh_key: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


SEAT_FREE_OPEN = "NOT taken AND json_array_length(groups) = 0"
SEAT_FREE_RESERVED = "NOT taken AND json_array_length(groups) > 0"


class Seat(Base):
    """A seat: a GPU, MIG/vGPU slice, shared GPU, VM, Slurm or cloud machine that one participant uses.

    ``device_uuid`` is empty until the seat is provisioned; ``groups`` lists the course groups whose
    needs it satisfies (empty = decided from kind and memory); ``state`` is the engine's last word.
    The vocabularies (kinds, engines, states) live in :mod:`gpuseat.core.seating`.
    """

    __tablename__ = "seats"
    __table_args__ = (
        UniqueConstraint("course_id", "key", name="uq_seats_course_key"),
        UniqueConstraint("course_id", "device_uuid", name="uq_seats_course_device_uuid"),
        Index("ix_seats_free", "course_id", sqlite_where=text("NOT taken"), postgresql_where=text("NOT taken")),
        # the claim's preference order over free open seats, and the free reserved seats (migration 0012;
        # there ``key`` is ``key COLLATE "C"`` on PostgreSQL, as the claim compares keys)
        Index(
            "ix_seats_free_order",
            "course_id",
            text("(kind = 'cloud')"),
            text("(memory_gb IS NULL)"),
            "memory_gb",
            "key",
            sqlite_where=text(SEAT_FREE_OPEN),
            postgresql_where=text(SEAT_FREE_OPEN),
        ),
        Index(
            "ix_seats_free_reserved",
            "course_id",
            sqlite_where=text(SEAT_FREE_RESERVED),
            postgresql_where=text(SEAT_FREE_RESERVED),
        ),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16))
    host: Mapped[str | None] = mapped_column(String(256))
    device_uuid: Mapped[str | None] = mapped_column(String(96))
    profile: Mapped[str | None] = mapped_column(String(64))
    memory_gb: Mapped[float | None] = mapped_column(Float)
    groups: Mapped[list[str]] = mapped_column(JSON)
    engine: Mapped[str] = mapped_column(String(16))
    engine_ref: Mapped[str | None] = mapped_column(String(512))
    state: Mapped[str] = mapped_column(String(16))
    state_reason: Mapped[str | None] = mapped_column(Text)
    state_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    connect: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # structured way in (core.readiness.Access.to_dict) and the last readiness check (Readiness.to_dict)
    access: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    readiness: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # true while an assignment of this seat is open: kept by database triggers on assignments (migration
    # 0011), never written by the application; the claim reads it on the seat row it locks
    taken: Mapped[bool] = mapped_column(Boolean, server_default=false())


class Assignment(Base):
    """Seat ↔ participant from ``valid_from`` until ``valid_to`` (None = still assigned).

    The two partial unique indexes make the database refuse a second open assignment of one seat
    or of one participant, whatever code path tries it.
    """

    __tablename__ = "assignments"
    __table_args__ = (
        Index("uq_assignments_open_seat", "seat_id", unique=True, sqlite_where=OPEN, postgresql_where=OPEN),
        Index(
            "uq_assignments_open_participant",
            "participant_id",
            unique=True,
            sqlite_where=OPEN,
            postgresql_where=OPEN,
        ),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    seat_id: Mapped[int] = mapped_column(ForeignKey("seats.id", ondelete="CASCADE"), index=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id", ondelete="CASCADE"), index=True)
    valid_from: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    valid_to: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    mode: Mapped[str] = mapped_column(String(16), server_default="assigned")
    ended_by: Mapped[str | None] = mapped_column(String(32))


class AccessToken(Base):
    """A participant's access link secret, stored only as its SHA-256 (the token itself is shown once)."""

    __tablename__ = "access_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Event(Base):
    """One line of the append-only log: who did what to which participant or seat (names, not ids)."""

    __tablename__ = "events"
    # (course_key, id): the newest row of one course, which a monitor of that course asks on every tick (0020)
    __table_args__ = (
        Index("ix_events_course_at", "course_key", "at"),
        Index("ix_events_course_id", "course_key", "id"),
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    course_key: Mapped[str | None] = mapped_column(String(64))
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(32))
    participant: Mapped[str | None] = mapped_column(String(128))
    seat: Mapped[str | None] = mapped_column(String(128))
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class Device(Base):
    """A device the monitor has seen (GPU or MIG instance), so samples store a small integer."""

    __tablename__ = "devices"
    __table_args__ = (UniqueConstraint("host", "uuid", name="uq_devices_host_uuid"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(256))
    uuid: Mapped[str] = mapped_column(String(96))
    name: Mapped[str | None] = mapped_column(String(256))
    parent_uuid: Mapped[str | None] = mapped_column(String(96))
    profile: Mapped[str | None] = mapped_column(String(64))


class Sample(Base):
    """One raw reading of one device (kept for the last hour, then rolled up)."""

    __tablename__ = "samples"
    __table_args__ = (
        Index("ix_samples_ts", "ts"),
        Index("ux_samples_device_id_ts", "device_id", "ts", unique=True),  # one sample per device and second
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    ts: Mapped[int] = mapped_column(Integer)  # Unix seconds
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"))
    seat_id: Mapped[int | None] = mapped_column(ForeignKey("seats.id", ondelete="SET NULL"))
    participant_id: Mapped[int | None] = mapped_column(ForeignKey("participants.id", ondelete="SET NULL"))
    memory_used_mib: Mapped[int | None] = mapped_column(Integer)
    memory_total_mib: Mapped[int | None] = mapped_column(Integer)
    utilization_gpu: Mapped[int | None] = mapped_column(SmallInteger)
    power_w: Mapped[float | None] = mapped_column(Float)
    temperature_c: Mapped[int | None] = mapped_column(SmallInteger)
    processes: Mapped[int] = mapped_column(SmallInteger)
    foreign_processes: Mapped[int] = mapped_column(SmallInteger)
    active: Mapped[bool] = mapped_column(Boolean)


class MinuteAggregate(Base):
    """One device over one minute: how many samples, how many in use, memory peak and mean."""

    __tablename__ = "minute_aggregates"
    minute: Mapped[int] = mapped_column(Integer, primary_key=True)  # Unix seconds // 60
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"), primary_key=True)
    seat_id: Mapped[int | None] = mapped_column(ForeignKey("seats.id", ondelete="SET NULL"))
    participant_id: Mapped[int | None] = mapped_column(ForeignKey("participants.id", ondelete="SET NULL"))
    samples: Mapped[int] = mapped_column(SmallInteger)
    active_samples: Mapped[int] = mapped_column(SmallInteger)
    memory_max_mib: Mapped[int | None] = mapped_column(Integer)
    memory_avg_mib: Mapped[int | None] = mapped_column(Integer)
    utilization_avg: Mapped[int | None] = mapped_column(SmallInteger)


class AlertRecord(Base):
    """An alert as raised (and when it cleared), of one course and (when it names one) one seat.

    ``seat`` and ``participant`` keep the names as the monitor saw them; ``seat_id`` and ``course_id``
    place the alert (seat keys are unique only within a course).
    """

    __tablename__ = "alerts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    key: Mapped[str] = mapped_column(String(256))
    seat_id: Mapped[int | None] = mapped_column(ForeignKey("seats.id", ondelete="SET NULL"), index=True)
    course_id: Mapped[int | None] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"), index=True)
    seat: Mapped[str | None] = mapped_column(String(128))
    participant: Mapped[str | None] = mapped_column(String(128))
    message: Mapped[str] = mapped_column(Text)
    raised_at: Mapped[float] = mapped_column(Float)
    cleared_at: Mapped[float | None] = mapped_column(Float)


class Survey(Base):
    """A course's survey: the template it uses (TOML text, so later template edits never change it)
    and when it was opened and closed. Whether it is open is ``courses.survey_state``."""

    __tablename__ = "surveys"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"), unique=True)
    template_key: Mapped[str] = mapped_column(String(64))
    template_text: Mapped[str] = mapped_column(Text)
    opened_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    closed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class SurveyResponse(Base):
    """One participant's answers (editable while the survey is open: one row per participant)."""

    __tablename__ = "survey_responses"
    __table_args__ = (UniqueConstraint("survey_id", "participant_id", name="uq_survey_responses_survey_participant"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    survey_id: Mapped[int] = mapped_column(ForeignKey("surveys.id", ondelete="CASCADE"))
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id", ondelete="CASCADE"), index=True)
    answers: Mapped[dict[str, Any]] = mapped_column(JSON)
    submitted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PortalUser(Base):
    """An organizer who may log in to the portal; the password is stored as an argon2id hash only."""

    __tablename__ = "portal_users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(256))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PortalSetting(Base):
    """Portal settings shared by every server process (e.g. the key that signs session cookies)."""

    __tablename__ = "portal_settings"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class PortalSession(Base):
    """An organizer's login, kept on the server so logout, a new password or "log out everywhere" end it.

    The cookie holds a random secret; only its SHA-256 is stored (a leaked table opens no session).
    """

    __tablename__ = "portal_sessions"
    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    username: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


# The portal and the JupyterHub culler ask "what did this seat do lately?" on every poll: index the
# monitor's tables by seat (created by the portal's migration).
Index("ix_samples_seat_id_ts", Sample.seat_id, Sample.ts)
Index("ix_minute_aggregates_seat_id_minute", MinuteAggregate.seat_id, MinuteAggregate.minute)
Index("ix_minute_aggregates_participant_id_minute", MinuteAggregate.participant_id, MinuteAggregate.minute)


class EngineSetting(Base):
    """One engine's settings for one course (validated by the engine's settings model), shared by every
    organizer machine and agent on the store; each change writes an events row."""

    __tablename__ = "engine_settings"
    __table_args__ = (UniqueConstraint("course_id", "engine", name="uq_engine_settings_course_engine"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"))
    engine: Mapped[str] = mapped_column(String(32))
    values: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AgentLease(Base):
    """Who applies for one engine on one host: the lease holder; others wait as standby.

    Times are Unix seconds of the database's clock (``store.agents`` reads it); agents also count on their own
    monotonic clocks how long a row went unrenewed, since that clock can step (docs/delivery.md)."""

    __tablename__ = "agent_leases"
    name: Mapped[str] = mapped_column(String(160), primary_key=True)
    holder: Mapped[str] = mapped_column(String(160))
    acquired_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)


class AgentStatus(Base):
    """What an agent did last (``gpuseat agent status`` and the portal read it)."""

    __tablename__ = "agent_status"
    name: Mapped[str] = mapped_column(String(160), primary_key=True)
    holder: Mapped[str] = mapped_column(String(160))
    role: Mapped[str] = mapped_column(String(16))
    cursor: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"))
    last_apply_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_resync_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    pending: Mapped[int] = mapped_column(Integer)
    failed: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AgentPresence(Base):
    """One running agent of a lease, leader or standby (``gpuseat agent status`` lists them): written
    every third of its lease period, until ``expires_at`` (three lease periods on; the database's clock, as
    the leases'), after which it is not shown and the next agent to report deletes it (migration 0018)."""

    __tablename__ = "agent_presence"
    name: Mapped[str] = mapped_column(String(160), primary_key=True)
    holder: Mapped[str] = mapped_column(String(160), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))
    reported_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)


class EngineHolding(Base):
    """Access an engine found on a machine after its last apply (an account that can log in, a key, a
    job): what ``course delete`` asks before it deletes, and what an agent revokes for a deleted course.
    Keyed by course *key*, not id: the rows outlive the course until the access is gone."""

    __tablename__ = "engine_holdings"
    __table_args__ = (Index("ix_engine_holdings_course_key", "course_key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    course_key: Mapped[str] = mapped_column(String(64))
    engine: Mapped[str] = mapped_column(String(32))
    host: Mapped[str] = mapped_column(String(256))
    what: Mapped[str] = mapped_column(String(32))
    login: Mapped[str] = mapped_column(String(64))
    participant: Mapped[str | None] = mapped_column(String(128))
    seat: Mapped[str | None] = mapped_column(String(128))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class CourseDeletion(Base):
    """A ``course delete`` waiting for the engines to take every access away (then the rows go)."""

    __tablename__ = "course_deletions"
    course_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    export_path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    actor: Mapped[str] = mapped_column(String(128))
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class SeatRequest(Base):
    """A participant's (or the organizer's) request for their seat: start, stop, restart, reset, a new
    SSH key, or the agent's own stop (quota, idle). ``state`` goes pending → done or failed with
    ``reason``; the seat's engine carries it out (issue 40)."""

    __tablename__ = "seat_requests"
    __table_args__ = (
        Index("ix_seat_requests_course_state", "course_id", "state"),
        Index("ix_seat_requests_participant_at", "participant_id", "requested_at"),
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"))
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id", ondelete="CASCADE"))
    seat_key: Mapped[str | None] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(16))
    payload: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(128))
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    done_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class SeatHours(Base):
    """The seat-hour ledger of a participant: an organizer's top-up (``topup``, hours added) or their
    own quota (``quota``: the latest replaces the course's and the group's)."""

    __tablename__ = "seat_hours"
    __table_args__ = (Index("ix_seat_hours_participant", "participant_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"))
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    hours: Mapped[float] = mapped_column(Float)
    note: Mapped[str | None] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(128))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
