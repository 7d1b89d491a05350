"""Courses, roster, seats, assignments and access links: the one store every front end calls.

Open it with :func:`open_store` (``None`` = the SQLite file in the gpuseat data dir, or any SQLAlchemy
URL such as ``postgresql+psycopg://…``) and call its methods; every method is one transaction and
returns frozen views with ``to_dict()``. Commands that only read never create a database.

Race-free by construction: a seat is handed out inside one transaction that locks it
(``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), and the database
itself refuses a second open assignment of one seat or one participant (partial unique indexes), so
even a buggy caller cannot double-assign. Every change is written to the append-only ``events`` log.

Courses are named by ``key``; ``course=None`` means "the only course" (an error when there are none
or several). Participants are found by key, email or Unix user name.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import re
import secrets
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import and_, exists, func, inspect, or_, select, text, update
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from gpuseat.core.course import Course as CourseFile
from gpuseat.core.needs import SeatNeed
from gpuseat.core.roster import RosterRow, parse_roster
from gpuseat.core.seating import (
    ASSIGNABLE_STATES,
    CLAIM_MODES,
    COURSE_KEY_PATTERN,
    KEY_PATTERN,
    ClaimMode,
    EngineName,
    SeatKind,
    SeatState,
    misfit,
    preference,
    transition_error,
)
from gpuseat.db import immediate, make_engine, upgrade
from gpuseat.db.models import AccessToken, Assignment, Course, Event, Participant, Seat
from gpuseat.errors import (
    InputError,
    InvalidTransition,
    NoFreeSeat,
    NotFound,
    SeatTaken,
    StoreError,
    did_you_mean,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from gpuseat.catalog.bundle import Catalog

DEFAULT_ACTOR = "gpuseat"
TOKEN_BYTES = 32
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{20,128}$")
_TOUCH_EVERY = timedelta(minutes=1)  # last-used time is written at most once a minute per token
_CLAIM_RETRIES = 20
_LOCK_WINDOW = 32  # candidates offered to one FOR UPDATE SKIP LOCKED statement
_HOST = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252})$")
_DEVICE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]{1,90}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

__all__ = [
    "AssignReport",
    "AssignmentView",
    "CourseStore",
    "CourseView",
    "EventView",
    "IssuedToken",
    "ParticipantView",
    "RosterChange",
    "RosterReport",
    "SeatSpec",
    "SeatView",
    "open_store",
    "plan_option_for",
]


# -- views -----------------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, _View):
        return value.to_dict()
    return value


class _View:
    """One ``to_dict()`` per result: JSON-ready (ISO times, lists), the shape of ``--format json``."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain JSON values."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


def _utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every time leaving the store is aware UTC."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class CourseView(_View):
    """A course as stored: its file's summary (groups with needs), dates, counts."""

    key: str
    name: str
    timezone: str
    starts_on: date | None
    ends_on: date | None
    summary: dict[str, Any]
    plan_option: dict[str, Any] | None
    survey_state: str | None
    participants: int
    seats: int
    assigned: int
    created_at: datetime
    updated_at: datetime

    @property
    def groups(self) -> tuple[str, ...]:
        """The course's group names, in file order."""
        return tuple(g["name"] for g in self.summary.get("groups", ()))


@dataclass(frozen=True, slots=True)
class ParticipantView(_View):
    """A participant, with the key of the seat they hold now (None when they have none)."""

    course: str
    key: str
    name: str | None
    email: str | None
    group: str | None
    unix_user: str | None
    ssh_key: str | None
    seat: str | None
    created_at: datetime | None
    updated_at: datetime | None


@dataclass(frozen=True, slots=True)
class SeatView(_View):
    """A seat, its engine state and who holds it now."""

    course: str
    key: str
    kind: str
    host: str | None
    device_uuid: str | None
    profile: str | None
    memory_gb: float | None
    groups: tuple[str, ...]
    engine: str
    engine_ref: str | None
    state: str
    state_reason: str | None
    state_at: datetime | None
    connect: str | None
    participant: str | None
    assigned_since: datetime | None
    mode: str | None
    id: int = 0  # the database id (what the monitor's tables and services.activity use)


@dataclass(frozen=True, slots=True)
class AssignmentView(_View):
    """One assignment (open when ``valid_to`` is None); ``ended_by`` says why it closed."""

    course: str
    seat: str
    participant: str
    mode: str
    valid_from: datetime
    valid_to: datetime | None
    ended_by: str | None


@dataclass(frozen=True, slots=True)
class RosterChange(_View):
    """What a roster import did to one participant: ``added``, ``updated`` (with fields) or ``unchanged``."""

    key: str
    email: str
    action: str
    fields: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RosterReport(_View):
    """The result of a roster import; ``absent`` are stored participants the file no longer lists (kept)."""

    course: str
    added: int
    updated: int
    unchanged: int
    changes: tuple[RosterChange, ...]
    absent: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AssignReport(_View):
    """The result of :meth:`CourseStore.assign_all`: new assignments, how many were kept, who is left out."""

    course: str
    assigned: tuple[AssignmentView, ...]
    kept: int
    unassigned: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IssuedToken(_View):
    """A freshly issued access token: shown once, only its hash is stored."""

    course: str
    participant: str
    token: str
    created_at: datetime

    def link(self, base_url: str) -> str:
        """The participant's access link under ``base_url`` (``…/t/TOKEN``)."""
        return f"{base_url.rstrip('/')}/t/{self.token}"


@dataclass(frozen=True, slots=True)
class EventView(_View):
    """One line of the append-only log."""

    id: int
    at: datetime
    course: str | None
    actor: str
    action: str
    participant: str | None
    seat: str | None
    detail: dict[str, Any] | None


_Host = Annotated[str | None, Field(pattern=_HOST.pattern)]
_Device = Annotated[str | None, Field(pattern=_DEVICE.pattern)]
_EngineRef = Annotated[str | None, Field(max_length=512)]
_Connect = Annotated[str | None, Field(max_length=1024)]


def _one_line(value: str | None) -> str | None:
    if value is not None and _CONTROL.search(value):
        raise ValueError("must be one line without control characters")
    return value


class SeatSpec(BaseModel):
    """A seat to add: what a carve layout, a plan's cloud option, nvidia-smi or a person describes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(pattern=KEY_PATTERN.pattern)
    kind: SeatKind
    host: _Host = None
    device_uuid: _Device = None
    profile: str | None = Field(None, max_length=96, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+:@/-]*$")
    memory_gb: float | None = Field(None, gt=0, le=4096, allow_inf_nan=False)
    groups: tuple[str, ...] = ()
    engine: EngineName = "manual"
    engine_ref: _EngineRef = None
    connect: _Connect = None
    state: SeatState = "planned"

    _lines = field_validator("engine_ref", "connect")(_one_line)


class _SeatUpdate(BaseModel):
    """What an engine may change with a state: checked with the same rules as :class:`SeatSpec`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: EngineName | None = None
    engine_ref: _EngineRef = None
    connect: _Connect = None
    device_uuid: _Device = None
    host: _Host = None

    _lines = field_validator("engine_ref", "connect")(_one_line)


# -- opening ---------------------------------------------------------------------------------------


def open_store(url: str | None = None, *, create: bool = False) -> CourseStore:
    """The course store at ``url`` (``None``: ``GPUSEAT_DB_URL`` or SQLite in the data dir).

    ``create=False`` (commands that only read) refuses a missing database instead of making an empty
    one; a database with other applications' tables, or from a newer gpuseat, is refused either way.
    An older gpuseat schema is upgraded in place (its rows are kept).
    """
    engine = make_engine(url, create=create)
    shown = engine.url.render_as_string(hide_password=True)
    try:
        revision = None
        if "alembic_version" in inspect(engine).get_table_names():
            with engine.connect() as conn:
                revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except OperationalError as exc:
        engine.dispose()
        raise StoreError(
            f"cannot open the course database: {str(exc.orig).strip().splitlines()[0]}",
            where=shown,
            fix="check the --db URL, that the server runs and accepts you, and that the file is writable",
        ) from None
    except SQLAlchemyError:
        engine.dispose()
        raise InputError(
            "not a usable database", where=shown, fix="give gpuseat's database file (gpuseat.db) or a PostgreSQL URL"
        ) from None
    if revision is None and not create:
        engine.dispose()
        raise InputError(
            "no gpuseat tables in this database yet",
            where=shown,
            fix="create a course first (gpuseat course create COURSE.toml)",
        )
    known, heads = _known_revisions()
    if revision is not None and revision not in known:
        engine.dispose()
        raise StoreError(f"made by a newer gpuseat (schema revision {revision})", where=shown, fix="upgrade gpuseat")
    try:
        if revision is None or {revision} != heads:
            upgrade(engine)  # refuses other applications' tables
    except Exception:
        engine.dispose()
        raise
    return CourseStore(engine)


def plan_option_for(path: Path, rank: int, catalog: Catalog) -> dict[str, Any]:
    """Option ``rank`` (1 = cheapest) of ``gpuseat plan`` on a course file, as its JSON (to store with the course)."""
    from gpuseat.services.planning import plan_course

    if not 1 <= rank <= 1000:
        raise InputError(f"--plan-option {rank}", where="--plan-option", fix="give a rank from 1 (the cheapest)")
    options = plan_course(path, catalog).to_dict()["options"]
    if rank > len(options):
        raise InputError(
            f"the plan has {len(options)} option(s), not {rank}",
            where="--plan-option",
            fix=f"choose 1 to {len(options)} (gpuseat plan {path} lists them)",
        )
    return dict(options[rank - 1])


def _known_revisions() -> tuple[set[str], set[str]]:
    """(every revision, the heads) of the packaged migrations, read from their files without Alembic.

    Importing Alembic costs a loaded machine a noticeable part of a CLI command; a database already at
    the head needs none of it.
    """
    found: dict[str, str | None] = {}
    for path in (Path(__file__).parents[1] / "db" / "migrations" / "versions").glob("[0-9]*.py"):
        source = path.read_text(encoding="utf-8")
        rev = re.search(r'^revision = "([^"]+)"', source, re.M)
        down = re.search(r'^down_revision = (?:"([^"]+)"|None)', source, re.M)
        if rev:
            found[rev.group(1)] = down.group(1) if down else None
    return set(found), set(found) - {d for d in found.values() if d}


def token_hash(token: str) -> str:
    """SHA-256 of a token (hex). Tokens carry 256 random bits, so a fast hash is enough."""
    return hashlib.sha256(token.encode()).hexdigest()


# -- the store -------------------------------------------------------------------------------------


class CourseStore:
    """Courses, roster, seats, assignments, tokens and events in one database (see the module doc)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._writer = immediate(engine)  # SQLite: BEGIN IMMEDIATE; PostgreSQL: unchanged
        self._courses: dict[str, Course] = {}
        database = engine.url.database if engine.dialect.name == "sqlite" else None
        self._lock_path = f"{database}.lock" if database and database != ":memory:" else None

    def close(self) -> None:
        """Release pooled connections."""
        self.engine.dispose()

    def __enter__(self) -> CourseStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _course_cached(self, s: Session, key: str | None) -> Course:
        """The course row, kept per store for a named course (claims are hot; a course is never deleted).

        ``None`` ("the only course") is looked up every time: another course may have been created since.
        """
        if key is None:
            return _course(s, None)
        row = self._courses.get(key)
        if row is None:
            found = _course(s, key)
            # a transient copy: a rollback expires the session's rows, this one stays readable
            row = Course(id=found.id, key=found.key, name=found.name, summary=dict(found.summary or {}))
            self._courses[key] = row
        return row

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with self._queue(), Session(self._writer, expire_on_commit=False) as session, session.begin():
            yield session

    @contextmanager
    def _queue(self) -> Iterator[None]:
        """SQLite: writers of this file take turns through an OS file lock before ``BEGIN IMMEDIATE``.

        SQLite's own busy handler polls with growing sleeps, so under 16 busy processes one writer can
        wait many seconds while others keep winning; a blocking ``flock`` hands the turn over as soon
        as it is free. PostgreSQL (row locks) needs none of this.
        """
        if self._lock_path is None:
            yield
            return
        import fcntl

        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as session, session.begin():
            yield session

    # -- courses -----------------------------------------------------------------------------------

    def create_course(
        self,
        path: Path,
        *,
        key: str | None = None,
        timezone: str = "UTC",
        plan_option: dict[str, Any] | None = None,
        actor: str = DEFAULT_ACTOR,
    ) -> CourseView:
        """Store a course file (text and parsed summary); ``key`` defaults to the file name's slug."""
        from gpuseat.files import read_text
        from gpuseat.services.planning import load_course

        parsed = load_course(path)
        return self.create_course_from(
            parsed,
            key=key or _slug(path.stem),
            source_text=read_text(path),
            timezone=timezone,
            plan_option=plan_option,
            actor=actor,
        )

    def create_course_from(
        self,
        course: CourseFile,
        *,
        key: str,
        source_text: str | None = None,
        timezone: str = "UTC",
        plan_option: dict[str, Any] | None = None,
        actor: str = DEFAULT_ACTOR,
    ) -> CourseView:
        """Store an already parsed course under ``key``; an existing key is an input error."""
        if not COURSE_KEY_PATTERN.match(key):
            raise InputError(
                f"course key {key!r} is not a slug",
                where="--key",
                fix="use lower-case letters, digits and '-', e.g. dl-2016",
            )
        _check_timezone(timezone)
        now = datetime.now(UTC)
        with self._write() as s:
            if s.scalar(select(Course.id).where(Course.key == key)) is not None:
                raise InputError(
                    f"a course {key!r} exists already",
                    where="--key",
                    fix="choose another key (--key) or use the existing course",
                )
            row = Course(
                key=key,
                name=course.name,
                source_text=source_text,
                summary=_summary(course),
                timezone=timezone,
                starts_on=course.schedule.start,
                ends_on=course.schedule.last_day,
                plan_option=plan_option,
                created_at=now,
                updated_at=now,
            )
            s.add(row)
            s.flush()
            _log(s, key, actor, "course.create", detail={"name": course.name})
            return self._course_view(s, row)

    def set_plan_option(self, course: str | None, option: dict[str, Any], *, actor: str = DEFAULT_ACTOR) -> CourseView:
        """Record the plan option the organiser chose (the JSON of one ``plan`` option)."""
        with self._write() as s:
            row = _course(s, course)
            row.plan_option, row.updated_at = option, datetime.now(UTC)
            _log(s, row.key, actor, "course.plan", detail={"rank": option.get("rank")})
            return self._course_view(s, row)

    def set_survey_state(self, course: str | None, state: str, *, actor: str = DEFAULT_ACTOR) -> CourseView:
        """Record where the course's survey stands (free text up to 32 characters, e.g. ``open``)."""
        if not re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", state):
            raise InputError(f"survey state {state!r}", where="survey_state", fix="use a short lower-case word")
        with self._write() as s:
            row = _course(s, course)
            row.survey_state, row.updated_at = state, datetime.now(UTC)
            _log(s, row.key, actor, "course.survey", detail={"state": state})
            return self._course_view(s, row)

    def list_courses(self) -> list[CourseView]:
        """Every course, by key."""
        with self._read() as s:
            return [self._course_view(s, c) for c in s.scalars(select(Course).order_by(Course.key))]

    def get_course(self, course: str | None = None) -> CourseView:
        """One course (``None``: the only one)."""
        with self._read() as s:
            return self._course_view(s, _course(s, course))

    def course_file(self, course: str | None = None) -> CourseFile:
        """The stored course file, parsed again (for needs and schedule)."""
        from gpuseat.files import validate

        with self._read() as s:
            row = _course(s, course)
            if row.source_text is None:
                raise NotFound(f"course {row.key!r} has no course file", where="--course", fix="create it from a file")
            import tomllib

            return validate(CourseFile, tomllib.loads(row.source_text), where=f"course {row.key}")

    def _course_view(self, s: Session, row: Course) -> CourseView:
        participants = s.scalar(select(func.count()).where(Participant.course_id == row.id)) or 0
        seats = s.scalar(select(func.count()).where(Seat.course_id == row.id)) or 0
        assigned = (
            s.scalar(
                select(func.count())
                .select_from(Assignment)
                .join(Seat, Seat.id == Assignment.seat_id)
                .where(Seat.course_id == row.id, Assignment.valid_to.is_(None))
            )
            or 0
        )
        return CourseView(
            key=row.key,
            name=row.name,
            timezone=row.timezone,
            starts_on=row.starts_on,
            ends_on=row.ends_on,
            summary=dict(row.summary or {}),
            plan_option=row.plan_option,
            survey_state=row.survey_state,
            participants=participants,
            seats=seats,
            assigned=assigned,
            created_at=cast(datetime, _utc(row.created_at)),
            updated_at=cast(datetime, _utc(row.updated_at)),
        )

    # -- roster ------------------------------------------------------------------------------------

    def import_roster(
        self, course: str | None, source: Path | str, *, where: str | None = None, actor: str = DEFAULT_ACTOR
    ) -> RosterReport:
        """Import a roster CSV (a path, or its text with ``where`` naming it) in one transaction.

        Participants are matched by email: new ones are added, known ones updated (the report lists
        the changed fields), ones no longer listed are kept and reported as ``absent``. A bad row
        raises :class:`InputError` with ``FILE:LINE:COLUMN`` and nothing is stored.
        """
        if isinstance(source, Path):
            from gpuseat.files import read_text

            text, where = read_text(source), where or str(source)
        else:
            text, where = source, where or "roster"
        with self._write() as s:
            crow = _course(s, course)
            groups = tuple(g["name"] for g in (crow.summary or {}).get("groups", ())) or ("participants",)
            rows = parse_roster(text, groups=groups, where=where)
            _check_group_sizes(rows, crow, where)
            return _apply_roster(s, crow, rows, where, actor)

    def participants(self, course: str | None = None) -> list[ParticipantView]:
        """Every participant of a course with their current seat, by key."""
        with self._read() as s:
            crow = _course(s, course)
            q = (
                select(Participant, Seat.key)
                .outerjoin(Assignment, and_(Assignment.participant_id == Participant.id, Assignment.valid_to.is_(None)))
                .outerjoin(Seat, Seat.id == Assignment.seat_id)
                .where(Participant.course_id == crow.id)
                .order_by(Participant.key)
            )
            return [_participant_view(crow.key, p, seat) for p, seat in s.execute(q)]

    def find_participant(self, course: str | None, who: str) -> ParticipantView:
        """A participant by key, email (any case) or Unix user name; :class:`NotFound` otherwise."""
        with self._read() as s:
            crow = _course(s, course)
            p = _participant(s, crow, who)
            return _participant_view(crow.key, p, _open_seat_key(s, p.id))

    # -- seats -------------------------------------------------------------------------------------

    def add_seats(
        self, course: str | None, specs: Iterable[SeatSpec | dict[str, Any]], *, actor: str = DEFAULT_ACTOR
    ) -> list[SeatView]:
        """Add seats in one transaction; a key or device used twice (here or already stored) is refused."""
        from gpuseat.files import validate

        checked = [
            spec if isinstance(spec, SeatSpec) else validate(SeatSpec, spec, where=f"seat {i + 1}")
            for i, spec in enumerate(specs)
        ]
        now = datetime.now(UTC)
        with self._write() as s:
            crow = _course(s, course)
            groups = _group_names(crow)
            keys = set(s.scalars(select(Seat.key).where(Seat.course_id == crow.id)))
            devices = set(s.scalars(select(Seat.device_uuid).where(Seat.course_id == crow.id)))
            for i, spec in enumerate(checked):
                where = f"seat {i + 1} ({spec.key})"
                if spec.key in keys:
                    raise InputError(
                        f"seat key {spec.key!r} is used twice in course {crow.key!r}",
                        where=where,
                        fix="give each seat its own key (or release and re-add the existing one)",
                    )
                if spec.device_uuid is not None and spec.device_uuid in devices:
                    raise InputError(
                        f"device {spec.device_uuid} already backs another seat",
                        where=where,
                        fix="one seat per GPU or MIG device",
                    )
                for g in spec.groups:
                    if g not in groups:
                        raise InputError(
                            f"unknown group {g!r}.{did_you_mean(g, groups)}",
                            where=where,
                            fix=f"use one of the course's groups: {', '.join(groups)}",
                        )
                keys.add(spec.key)
                devices.add(spec.device_uuid)
            added = []
            for spec in checked:
                seat = Seat(
                    course_id=crow.id,
                    created_at=now,
                    state_at=now,
                    state_reason="added",
                    **spec.model_dump(exclude={"groups"}),
                    groups=list(spec.groups),
                )
                s.add(seat)
                added.append(seat)
            s.flush()
            _log(s, crow.key, actor, "seats.add", detail={"seats": [a.key for a in added]})
            return [_seat_view(crow.key, a, None) for a in added]

    def seats(self, course: str | None = None) -> list[SeatView]:
        """Every seat of a course with its current participant, by key."""
        with self._read() as s:
            crow = _course(s, course)
            q = (
                select(Seat, Participant.key, Assignment)
                .outerjoin(Assignment, and_(Assignment.seat_id == Seat.id, Assignment.valid_to.is_(None)))
                .outerjoin(Participant, Participant.id == Assignment.participant_id)
                .where(Seat.course_id == crow.id)
                .order_by(Seat.key)
            )
            return [_seat_view(crow.key, seat, (who, a)) for seat, who, a in s.execute(q)]

    def get_seat(self, course: str | None, seat: str) -> SeatView:
        """One seat by key, with its current participant."""
        with self._read() as s:
            crow = _course(s, course)
            row = _seat(s, crow, seat)
            return _seat_view(crow.key, row, _holder(s, row.id))

    def seat_of(self, course: str | None, participant: str) -> SeatView | None:
        """The seat a participant holds now (None when they hold none)."""
        with self._read() as s:
            crow = _course(s, course)
            p = _participant(s, crow, participant)
            row = _open_seat(s, p.id)
            return None if row is None else _seat_view(crow.key, row, _holder(s, row.id))

    def set_seat_state(
        self,
        course: str | None,
        seat: str,
        state: SeatState | str,
        *,
        reason: str | None = None,
        engine: EngineName | None = None,
        engine_ref: str | None = None,
        connect: str | None = None,
        device_uuid: str | None = None,
        host: str | None = None,
        actor: str = DEFAULT_ACTOR,
    ) -> SeatView:
        """Move a seat through planned → requested → running (or failed/released), with a reason.

        Engines call this as they provision: the engine, its reference (domain name, job id, cluster
        name), how to connect and the device UUID are updated with the state when given.
        """
        from gpuseat.files import validate

        changes = validate(
            _SeatUpdate,
            {"engine": engine, "engine_ref": engine_ref, "connect": connect, "device_uuid": device_uuid, "host": host},
            where=f"seat {seat}",
        )
        if reason is not None and (len(reason) > 2000 or "\x00" in reason):
            raise InputError("reason too long or with NUL bytes", where="reason", fix="keep it under 2000 characters")
        now = datetime.now(UTC)
        with self._write() as s:
            crow = _course(s, course)
            row = _seat(s, crow, seat, lock=True)
            problem = transition_error(row.state, state)
            if problem:
                raise InvalidTransition(problem, where=f"seat {row.key}", fix="request the seat again first")
            before = row.state
            row.state, row.state_reason, row.state_at = state, reason, now
            for name in ("engine", "engine_ref", "connect", "device_uuid", "host"):
                value = getattr(changes, name)
                if value is not None:
                    setattr(row, name, value)
            s.flush()
            _log(
                s,
                crow.key,
                actor,
                "seat.state",
                seat=row.key,
                detail={"from": before, "to": state, "reason": reason, "engine_ref": row.engine_ref},
            )
            return _seat_view(crow.key, row, _holder(s, row.id))

    # -- assignments -------------------------------------------------------------------------------

    def claim_seat(
        self, course: str | None, participant: str, *, mode: ClaimMode = "assigned", actor: str = DEFAULT_ACTOR
    ) -> SeatView:
        """The participant's seat: the one they hold, else the best free seat that suits their group.

        Safe under any number of concurrent callers: the chosen seat row is locked (``FOR UPDATE SKIP
        LOCKED``, so concurrent claims take different seats instead of queueing) and the partial unique
        indexes reject a double assignment, which is retried. Raises :class:`NoFreeSeat` when no
        suitable seat is free. ``mode``: ``assigned`` (kept until released) or ``pool`` (handed back
        when the participant's server stops).
        """
        if mode not in CLAIM_MODES:
            raise InputError(f"unknown mode {mode!r}", where="mode", fix=f"one of {', '.join(CLAIM_MODES)}")
        sqlite = self.engine.dialect.name == "sqlite"
        for _attempt in range(_CLAIM_RETRIES):
            try:
                if sqlite:  # look without the write lock, then hold it only to take the seat
                    with self._read() as s:
                        crow = self._course_cached(s, course)
                        p, held, open_a = _participant_and_seat(s, crow, participant)
                        if held is not None:
                            return _seat_view(crow.key, held, (p.key, open_a))
                        candidates = _free_suitable(s, crow, p.group_name, _needs(crow))
                        if not candidates:
                            raise _no_free_seat(s, crow, p)
                        pid, pkey = p.id, p.key
                    with self._write() as s:
                        chosen = _still_free(s, candidates)
                        if chosen is None:
                            continue  # all taken meanwhile: look again
                        view = self._take(s, crow, pid, pkey, chosen, mode, actor)
                    return view
                with self._write() as s:
                    crow = self._course_cached(s, course)
                    p, held, open_a = _participant_and_seat(s, crow, participant)
                    if held is not None:
                        return _seat_view(crow.key, held, (p.key, open_a))
                    candidates = _free_suitable(s, crow, p.group_name, _needs(crow))
                    if not candidates:
                        raise _no_free_seat(s, crow, p)
                    chosen = _lock_first(s, candidates)
                    if chosen is None:
                        time.sleep(random.uniform(0.002, 0.02))  # all candidates are being claimed right now
                        continue
                    view = self._take(s, crow, p.id, p.key, chosen, mode, actor)
                return view
            except IntegrityError:
                continue  # someone else took that seat, or this participant's other claim won: look again
        raise StoreError(
            f"could not claim a seat after {_CLAIM_RETRIES} tries (heavy contention)",
            where=f"participant {participant}",
            fix="try again",
        )

    def _take(self, s: Session, crow: Course, pid: int, pkey: str, seat: Seat, mode: str, actor: str) -> SeatView:
        """Insert the assignment and its event (written at commit, where a double assignment fails)."""
        a = Assignment(seat_id=seat.id, participant_id=pid, valid_from=datetime.now(UTC), mode=mode)
        s.add(a)
        _log(s, crow.key, actor, "seat.claim", participant=pkey, seat=seat.key, detail={"mode": mode})
        return _seat_view(crow.key, seat, (pkey, a))

    def assign_all(
        self, course: str | None = None, *, partial: bool = False, actor: str = DEFAULT_ACTOR
    ) -> AssignReport:
        """Give every participant without a seat the best suitable free seat, deterministically.

        The most constrained groups go first, then participants by key; seats are preferred reserved
        for the group, then smallest, then by key. Re-running changes nothing. When some participant
        cannot be seated, :class:`NoFreeSeat` is raised and nothing is stored, unless ``partial``.
        """
        now = datetime.now(UTC)
        with self._write() as s:
            crow = _course(s, course)
            seats = list(s.scalars(select(Seat).where(Seat.course_id == crow.id).order_by(Seat.key).with_for_update()))
            taken = set(
                s.scalars(
                    select(Assignment.seat_id).where(
                        Assignment.valid_to.is_(None), Assignment.seat_id.in_([x.id for x in seats])
                    )
                )
            )
            people = list(s.scalars(select(Participant).where(Participant.course_id == crow.id)))
            holding = set(
                s.scalars(
                    select(Assignment.participant_id).where(
                        Assignment.valid_to.is_(None), Assignment.participant_id.in_([p.id for p in people])
                    )
                )
            )
            needs = _needs(crow)
            free = [x for x in seats if x.id not in taken and x.state in ASSIGNABLE_STATES]
            waiting = [p for p in people if p.id not in holding]
            fitting: dict[str | None, list[Seat]] = {}  # per group: suitable free seats, best first
            for group in {p.group_name for p in waiting}:
                suits = [x for x in free if _misfit(x, group, needs) is None]
                fitting[group] = sorted(suits, key=lambda x, g=group: _pref(x, g))  # type: ignore[misc]
            waiting.sort(key=lambda p: (len(fitting[p.group_name]), p.group_name or "", p.key))
            used: set[int] = set()
            made: list[AssignmentView] = []
            left: list[str] = []
            for p in waiting:
                seat = next((x for x in fitting[p.group_name] if x.id not in used), None)
                if seat is None:
                    left.append(p.key)
                    continue
                used.add(seat.id)
                a = Assignment(seat_id=seat.id, participant_id=p.id, valid_from=now, mode="assigned")
                s.add(a)
                made.append(_assignment_view(crow.key, seat.key, p.key, a))
            if left and not partial:
                raise NoFreeSeat(
                    f"{len(left)} participant(s) would have no suitable seat ({', '.join(sorted(left)[:10])}"
                    f"{', …' if len(left) > 10 else ''}); {len(made)} seat(s) would be assigned",
                    where=f"course {crow.key}",
                    fix="add seats for them (gpuseat seats add) or assign with --partial; nothing was stored",
                )
            s.flush()
            if made:
                _log(
                    s,
                    crow.key,
                    actor,
                    "seats.assign",
                    detail={"assigned": {m.participant: m.seat for m in made}, "left": left},
                )
            return AssignReport(crow.key, tuple(sorted(made, key=lambda m: m.seat)), len(holding), tuple(sorted(left)))

    def assign(self, course: str | None, participant: str, seat: str, *, actor: str = DEFAULT_ACTOR) -> AssignmentView:
        """Give a participant a chosen seat (they must not hold one; the seat must be free)."""
        with self._write() as s:
            crow = _course(s, course)
            p = _participant(s, crow, participant)
            row = _seat(s, crow, seat, lock=True)
            held = _open_seat(s, p.id)
            if held is not None:
                if held.id == row.id:
                    return _assignment_view(crow.key, row.key, p.key, _open(s, seat_id=row.id))
                raise SeatTaken(
                    f"{p.key} already holds seat {held.key}",
                    where=f"participant {p.key}",
                    fix=f"move them instead: gpuseat seats move --participant {p.key} --seat {row.key}",
                )
            return self._give(s, crow, p, row, actor, "seat.assign")

    def move(self, course: str | None, participant: str, seat: str, *, actor: str = DEFAULT_ACTOR) -> AssignmentView:
        """Move a participant to another (free) seat; the old assignment is closed, history kept."""
        with self._write() as s:
            crow = _course(s, course)
            p = _participant(s, crow, participant)
            row = _seat(s, crow, seat, lock=True)
            old = _open(s, participant_id=p.id)
            if old is not None and old.seat_id == row.id:
                return _assignment_view(crow.key, row.key, p.key, old)
            if old is not None:
                old.valid_to, old.ended_by = datetime.now(UTC), "move"
                s.flush()
            return self._give(s, crow, p, row, actor, "seat.move")

    def _give(self, s: Session, crow: Course, p: Participant, row: Seat, actor: str, action: str) -> AssignmentView:
        holder = _holder(s, row.id)
        if holder is not None:
            raise SeatTaken(
                f"seat {row.key} is held by {holder[0]}",
                where=f"seat {row.key}",
                fix="release it first (gpuseat seats release --seat …) or choose a free seat",
            )
        problem = _misfit(row, p.group_name, _needs(crow))
        if problem is not None:
            raise InputError(
                f"seat {row.key} does not suit {p.key}: {problem}", where=f"seat {row.key}", fix="choose another seat"
            )
        if row.state not in ASSIGNABLE_STATES:
            raise InputError(
                f"seat {row.key} is {row.state}", where=f"seat {row.key}", fix="request the seat again first"
            )
        a = Assignment(seat_id=row.id, participant_id=p.id, valid_from=datetime.now(UTC), mode="assigned")
        s.add(a)
        s.flush()
        _log(s, crow.key, actor, action, participant=p.key, seat=row.key)
        return _assignment_view(crow.key, row.key, p.key, a)

    def release(
        self,
        course: str | None,
        *,
        participant: str | None = None,
        seat: str | None = None,
        reason: str = "released",
        actor: str = DEFAULT_ACTOR,
    ) -> AssignmentView | None:
        """Close the open assignment of a participant or of a seat; None when there was none."""
        if (participant is None) == (seat is None):
            raise InputError("name a participant or a seat", where="release", fix="give exactly one of them")
        with self._write() as s:
            crow = _course(s, course)
            if participant is not None:
                p = _participant(s, crow, participant)
                a = _open(s, participant_id=p.id)
            else:
                row = _seat(s, crow, cast(str, seat))
                a = _open(s, seat_id=row.id)
            if a is None:
                return None
            a.valid_to, a.ended_by = datetime.now(UTC), reason[:32]
            s.flush()
            seat_key = s.scalar(select(Seat.key).where(Seat.id == a.seat_id)) or ""
            who = s.scalar(select(Participant.key).where(Participant.id == a.participant_id)) or ""
            _log(s, crow.key, actor, "seat.release", participant=who, seat=seat_key, detail={"reason": reason})
            return _assignment_view(crow.key, seat_key, who, a)

    def history(
        self, course: str | None = None, *, participant: str | None = None, seat: str | None = None
    ) -> list[AssignmentView]:
        """Every assignment, open and closed, oldest first (optionally of one participant or seat)."""
        with self._read() as s:
            crow = _course(s, course)
            q = (
                select(Assignment, Seat.key, Participant.key)
                .join(Seat, Seat.id == Assignment.seat_id)
                .join(Participant, Participant.id == Assignment.participant_id)
                .where(Seat.course_id == crow.id)
                .order_by(Assignment.valid_from, Assignment.id)
            )
            if participant is not None:
                q = q.where(Participant.id == _participant(s, crow, participant).id)
            if seat is not None:
                q = q.where(Seat.id == _seat(s, crow, seat).id)
            return [_assignment_view(crow.key, sk, pk, a) for a, sk, pk in s.execute(q)]

    # -- access tokens -----------------------------------------------------------------------------

    def issue_tokens(
        self, course: str | None = None, participants: Sequence[str] | None = None, *, actor: str = DEFAULT_ACTOR
    ) -> list[IssuedToken]:
        """A new token for each participant (all by default) who has no active one; shown only here."""
        now = datetime.now(UTC)
        with self._write() as s:
            crow = _course(s, course)
            people = _people(s, crow, participants)
            active = set(
                s.scalars(
                    select(AccessToken.participant_id).where(
                        AccessToken.participant_id.in_([p.id for p in people]), AccessToken.revoked_at.is_(None)
                    )
                )
            )
            out = [_new_token(s, crow.key, p, now) for p in people if p.id not in active]
            if out:
                _log(s, crow.key, actor, "token.issue", detail={"participants": [t.participant for t in out]})
            return out

    def rotate_tokens(
        self, course: str | None = None, participants: Sequence[str] | None = None, *, actor: str = DEFAULT_ACTOR
    ) -> list[IssuedToken]:
        """Revoke the active tokens of the participants (all by default) and issue new ones."""
        now = datetime.now(UTC)
        with self._write() as s:
            crow = _course(s, course)
            people = _people(s, crow, participants)
            _revoke(s, [p.id for p in people], now)
            out = [_new_token(s, crow.key, p, now) for p in people]
            _log(s, crow.key, actor, "token.rotate", detail={"participants": [t.participant for t in out]})
            return out

    def revoke_tokens(
        self, course: str | None, participants: Sequence[str] | None = None, *, actor: str = DEFAULT_ACTOR
    ) -> int:
        """Revoke the active tokens of the participants (all by default); returns how many."""
        now = datetime.now(UTC)
        with self._write() as s:
            crow = _course(s, course)
            people = _people(s, crow, participants)
            count = _revoke(s, [p.id for p in people], now)
            _log(s, crow.key, actor, "token.revoke", detail={"participants": [p.key for p in people], "tokens": count})
            return count

    def participant_for_token(self, token: str) -> ParticipantView | None:
        """The participant an access token belongs to (None when unknown or revoked); notes its use.

        The lookup is by SHA-256 of the token (an index lookup, so timing reveals nothing about the
        token itself), then compared in constant time.
        """
        if not isinstance(token, str) or not _TOKEN.match(token):
            return None
        digest = token_hash(token)
        now = datetime.now(UTC)
        with self._read() as s:
            row = s.execute(
                select(AccessToken, Participant, Course.key)
                .join(Participant, Participant.id == AccessToken.participant_id)
                .join(Course, Course.id == Participant.course_id)
                .where(AccessToken.token_hash == digest, AccessToken.revoked_at.is_(None))
            ).first()
            if row is None or not hmac.compare_digest(row[0].token_hash, digest):
                return None
            tok, p, ckey = row
            tok_id, last = tok.id, _utc(tok.last_used_at)
            view = _participant_view(ckey, p, _open_seat_key(s, p.id))
        if last is None or now - last >= _TOUCH_EVERY:
            with self._write() as w:
                w.execute(update(AccessToken).where(AccessToken.id == tok_id).values(last_used_at=now))
        return view

    def token_status(self, course: str | None = None) -> list[dict[str, Any]]:
        """Per participant: whether an active token exists, when it was made and last used."""
        with self._read() as s:
            crow = _course(s, course)
            q = (
                select(Participant.key, AccessToken.created_at, AccessToken.last_used_at)
                .outerjoin(
                    AccessToken,
                    and_(AccessToken.participant_id == Participant.id, AccessToken.revoked_at.is_(None)),
                )
                .where(Participant.course_id == crow.id)
                .order_by(Participant.key)
            )
            return [
                {
                    "participant": k,
                    "active": c is not None,
                    "created_at": _jsonable(_utc(c)),
                    "last_used_at": _jsonable(_utc(u)),
                }
                for k, c, u in s.execute(q)
            ]

    # -- events ------------------------------------------------------------------------------------

    def events(self, course: str | None = None, *, after_id: int = 0, limit: int = 1000) -> list[EventView]:
        """Log lines of a course, oldest first, after ``after_id`` (to follow the log)."""
        with self._read() as s:
            crow = _course(s, course)
            q = (
                select(Event)
                .where(Event.course_key == crow.key, Event.id > after_id)
                .order_by(Event.id)
                .limit(max(1, min(limit, 100_000)))
            )
            return [
                EventView(
                    e.id, cast(datetime, _utc(e.at)), e.course_key, e.actor, e.action, e.participant, e.seat, e.detail
                )
                for e in s.scalars(q)
            ]

    def log(
        self,
        course: str | None,
        action: str,
        *,
        participant: str | None = None,
        seat: str | None = None,
        detail: dict[str, Any] | None = None,
        actor: str = DEFAULT_ACTOR,
    ) -> None:
        """Append a line to the log (for engines and front ends: e.g. ``portal.login``)."""
        if not re.fullmatch(r"[a-z][a-z0-9_.-]{0,31}", action):
            raise InputError(f"action {action!r}", where="action", fix="a short lower-case word like portal.login")
        with self._write() as s:
            _log(s, _course(s, course).key, actor, action, participant=participant, seat=seat, detail=detail)

    # -- delivery (gpuseat.store.access owns the SQL) ----------------------------------------------

    def record_delivery(self, course: str | None, seat: str, **changes: Any) -> bool:
        """Set a seat's access and/or state with one event (see :func:`gpuseat.store.access.record_delivery`)."""
        from gpuseat.store import access

        return access.record_delivery(self, course, seat, **changes)

    def record_readiness(self, results: list[Any], *, actor: str = DEFAULT_ACTOR) -> int:
        """Keep seats' latest readiness checks (see :func:`gpuseat.store.access.record_readiness`)."""
        from gpuseat.store import access

        return access.record_readiness(self, results, actor=actor)

    def access_of(self, course: str | None = None) -> dict[str, dict[str, Any]]:
        """Seat key → stored access details."""
        from gpuseat.store import access

        return access.access_of(self, course)

    def readiness_of(self, course: str | None = None) -> dict[str, dict[str, Any]]:
        """Seat key → the last readiness check."""
        from gpuseat.store import access

        return access.readiness_of(self, course)


# -- helpers (inside one session) ------------------------------------------------------------------


def _slug(text_: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text_.lower()).strip("-")[:62]
    return slug or "course"


def _check_timezone(name: str) -> None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        if not re.fullmatch(r"[A-Za-z0-9_+/-]{1,64}", name):
            raise ValueError
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(
            f"unknown time zone {name!r}", where="--timezone", fix="use an IANA name like Europe/Berlin"
        ) from None


def _summary(course: CourseFile) -> dict[str, Any]:
    sched = course.schedule
    return {
        "name": course.name,
        "participants": course.participant_count,
        "period_days": sched.period_days,
        "always_on": sched.always_on,
        "start": sched.start.isoformat(),
        "end": sched.last_day.isoformat(),
        "offers": list(course.offers),
        "groups": [{"name": g.name, "count": g.count, **g.need.model_dump()} for g in course.groups],
    }


def _group_names(crow: Course) -> tuple[str, ...]:
    return tuple(g["name"] for g in (crow.summary or {}).get("groups", ()))


def _needs(crow: Course) -> dict[str, SeatNeed]:
    out = {}
    for g in (crow.summary or {}).get("groups", ()):
        out[g["name"]] = SeatNeed.model_validate({k: v for k, v in g.items() if k in SeatNeed.model_fields})
    return out


def _misfit(seat: Seat, group: str | None, needs: dict[str, SeatNeed]) -> str | None:
    return misfit(
        kind=seat.kind,
        memory_gb=seat.memory_gb,
        engine=seat.engine,
        reserved_for=tuple(seat.groups or ()),
        group=group,
        need=needs.get(group) if group is not None else None,
    )


def _pref(seat: Seat, group: str | None) -> tuple[int, int, float, str]:
    return preference(
        key=seat.key, kind=seat.kind, memory_gb=seat.memory_gb, reserved_for=tuple(seat.groups or ()), group=group
    )


def _is_taken(seat_id: Any) -> Any:
    return exists().where(Assignment.seat_id == seat_id, Assignment.valid_to.is_(None))


def _free_suitable(s: Session, crow: Course, group: str | None, needs: dict[str, SeatNeed]) -> list[int]:
    """Ids of free seats that suit the group, best first (nothing locked yet)."""
    rows = s.execute(
        select(Seat.id, Seat.key, Seat.kind, Seat.memory_gb, Seat.engine, Seat.groups).where(
            Seat.course_id == crow.id, Seat.state.in_(ASSIGNABLE_STATES), ~_is_taken(Seat.id)
        )
    ).all()
    need = needs.get(group) if group is not None else None
    ranked = []
    for sid, key, kind, memory_gb, engine, groups in rows:
        reserved = tuple(groups or ())
        if misfit(kind=kind, memory_gb=memory_gb, engine=engine, reserved_for=reserved, group=group, need=need):
            continue
        rank = preference(key=key, kind=kind, memory_gb=memory_gb, reserved_for=reserved, group=group)
        ranked.append((rank, sid))
    return [sid for _, sid in sorted(ranked)]


def _still_free(s: Session, candidates: list[int], window: int = 64) -> Seat | None:
    """The best of the first ``window`` candidates that is still free and assignable (one query)."""
    head = candidates[:window]
    rows = s.scalars(
        select(Seat).where(Seat.id.in_(head), Seat.state.in_(ASSIGNABLE_STATES), ~_is_taken(Seat.id))
    ).all()
    order = {sid: i for i, sid in enumerate(head)}
    return min(rows, key=lambda r: order[r.id], default=None)


def _lock_first(s: Session, candidates: list[int]) -> Seat | None:
    """The first candidate seat that is still free, locked for this transaction (None if all are busy).

    SQLite: the transaction began with ``BEGIN IMMEDIATE``, so nobody else writes and the first
    candidate is free. PostgreSQL: one statement locks the best free candidate and skips the rows
    other claims hold (``FOR UPDATE SKIP LOCKED``, ordered by the candidates' rank).
    """
    if s.get_bind().dialect.name == "sqlite":
        return s.get(Seat, candidates[0])
    if s.get_bind().dialect.name == "postgresql":
        from sqlalchemy import Integer, bindparam
        from sqlalchemy.dialects.postgresql import ARRAY

        for start in range(0, len(candidates), _LOCK_WINDOW):  # small arrays: array_position is linear
            ids = bindparam("ids", candidates[start : start + _LOCK_WINDOW], type_=ARRAY(Integer))
            row = s.scalar(
                select(Seat)
                .where(Seat.id == func.any(ids), ~_is_taken(Seat.id))
                .order_by(func.array_position(ids, Seat.id))
                .limit(1)
                .with_for_update(skip_locked=True)
            )
            if row is not None:
                return row
        return None
    for sid in candidates:  # other databases: one row at a time
        row = s.scalar(select(Seat).where(Seat.id == sid, ~_is_taken(Seat.id)).with_for_update(skip_locked=True))
        if row is not None:
            return row
    return None


def _no_free_seat(s: Session, crow: Course, p: Participant) -> NoFreeSeat:
    total = s.scalar(select(func.count()).where(Seat.course_id == crow.id)) or 0
    return NoFreeSeat(
        f"no free seat suits {p.key} (group {p.group_name or '-'}); the course has {total} seat(s)",
        where=f"course {crow.key}",
        fix="add seats (gpuseat seats add) or release one (gpuseat seats release)",
    )


def _course(s: Session, key: str | None) -> Course:
    if key is not None:
        row = s.scalar(select(Course).where(Course.key == key))
        if row is None:
            known = list(s.scalars(select(Course.key)))
            raise NotFound(
                f"no course {key!r}.{did_you_mean(key, known)}",
                where="--course",
                fix=f"one of: {', '.join(known)}" if known else "create one: gpuseat course create COURSE.toml",
            )
        return row
    rows = list(s.scalars(select(Course).order_by(Course.key).limit(11)))
    if len(rows) == 1:
        return rows[0]
    if not rows:
        raise InputError("no course yet", where="--course", fix="create one: gpuseat course create COURSE.toml")
    raise InputError(
        f"{'more than 10' if len(rows) > 10 else len(rows)} courses: {', '.join(r.key for r in rows[:10])}",
        where="--course",
        fix="say which one with --course KEY",
    )


def _participant(s: Session, crow: Course, who: str) -> Participant:
    row = s.scalar(
        select(Participant)
        .where(
            Participant.course_id == crow.id,
            or_(Participant.key == who, Participant.email == who.lower(), Participant.unix_user == who),
        )
        .order_by(Participant.key != who)
        .limit(1)
    )
    if row is None:
        known = list(s.scalars(select(Participant.key).where(Participant.course_id == crow.id)))
        raise NotFound(
            f"no participant {who!r} in course {crow.key!r}.{did_you_mean(who, known)}",
            where="--participant",
            fix="give a participant's key, email or Unix user (gpuseat roster import adds them)",
        )
    return row


def _participant_and_seat(s: Session, crow: Course, who: str) -> tuple[Participant, Seat | None, Assignment | None]:
    """The participant with the seat and assignment they hold now, in one query."""
    row = s.execute(
        select(Participant, Seat, Assignment)
        .outerjoin(Assignment, and_(Assignment.participant_id == Participant.id, Assignment.valid_to.is_(None)))
        .outerjoin(Seat, Seat.id == Assignment.seat_id)
        .where(
            Participant.course_id == crow.id,
            or_(Participant.key == who, Participant.email == who.lower(), Participant.unix_user == who),
        )
        .order_by(Participant.key != who)
        .limit(1)
    ).first()
    if row is None:
        _participant(s, crow, who)  # raises NotFound with a hint
    assert row is not None
    return row[0], row[1], row[2]


def _people(s: Session, crow: Course, who: Sequence[str] | None) -> list[Participant]:
    if who is None:
        return list(s.scalars(select(Participant).where(Participant.course_id == crow.id).order_by(Participant.key)))
    return [_participant(s, crow, w) for w in who]


def _seat(s: Session, crow: Course, key: str, *, lock: bool = False) -> Seat:
    q = select(Seat).where(Seat.course_id == crow.id, Seat.key == key)
    row = s.scalar(q.with_for_update() if lock else q)
    if row is None:
        known = list(s.scalars(select(Seat.key).where(Seat.course_id == crow.id)))
        raise NotFound(
            f"no seat {key!r} in course {crow.key!r}.{did_you_mean(key, known)}",
            where="--seat",
            fix="gpuseat seats status lists the seats",
        )
    return row


def _open(s: Session, *, seat_id: int | None = None, participant_id: int | None = None) -> Assignment | None:
    q = select(Assignment).where(Assignment.valid_to.is_(None))
    q = (
        q.where(Assignment.seat_id == seat_id)
        if seat_id is not None
        else q.where(Assignment.participant_id == participant_id)
    )
    return s.scalar(q)


def _open_seat(s: Session, participant_id: int) -> Seat | None:
    return s.scalar(
        select(Seat)
        .join(Assignment, Assignment.seat_id == Seat.id)
        .where(Assignment.participant_id == participant_id, Assignment.valid_to.is_(None))
    )


def _open_seat_key(s: Session, participant_id: int) -> str | None:
    seat = _open_seat(s, participant_id)
    return None if seat is None else seat.key


def _holder(s: Session, seat_id: int) -> tuple[str, Assignment] | None:
    row = s.execute(
        select(Participant.key, Assignment)
        .join(Assignment, Assignment.participant_id == Participant.id)
        .where(Assignment.seat_id == seat_id, Assignment.valid_to.is_(None))
    ).first()
    return None if row is None else (row[0], row[1])


def _participant_view(course: str, p: Participant, seat: str | None) -> ParticipantView:
    return ParticipantView(
        course,
        p.key,
        p.name,
        p.email,
        p.group_name,
        p.unix_user,
        p.ssh_key,
        seat,
        _utc(p.created_at),
        _utc(p.updated_at),
    )


def _seat_view(course: str, x: Seat, holder: tuple[str | None, Assignment | None] | None) -> SeatView:
    who, a = holder if holder is not None else (None, None)
    return SeatView(
        course=course,
        key=x.key,
        kind=x.kind,
        host=x.host,
        device_uuid=x.device_uuid,
        profile=x.profile,
        memory_gb=x.memory_gb,
        groups=tuple(x.groups or ()),
        engine=x.engine,
        engine_ref=x.engine_ref,
        state=x.state,
        state_reason=x.state_reason,
        state_at=_utc(x.state_at),
        connect=x.connect,
        participant=who,
        assigned_since=_utc(a.valid_from) if a is not None else None,
        mode=a.mode if a is not None else None,
        id=x.id,
    )


def _assignment_view(course: str, seat: str, participant: str, a: Assignment | None) -> AssignmentView:
    assert a is not None
    return AssignmentView(
        course,
        seat,
        participant,
        a.mode or "assigned",
        cast(datetime, _utc(a.valid_from)),
        _utc(a.valid_to),
        a.ended_by,
    )


def _log(
    s: Session,
    course: str | None,
    actor: str,
    action: str,
    *,
    participant: str | None = None,
    seat: str | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    s.add(
        Event(
            at=datetime.now(UTC),
            course_key=course,
            actor=actor[:128],
            action=action,
            participant=participant,
            seat=seat,
            detail=detail,
        )
    )


def _new_token(s: Session, course: str, p: Participant, now: datetime) -> IssuedToken:
    token = secrets.token_urlsafe(TOKEN_BYTES)
    s.add(AccessToken(participant_id=p.id, token_hash=token_hash(token), created_at=now))
    return IssuedToken(course, p.key, token, now)


def _revoke(s: Session, participant_ids: list[int], now: datetime) -> int:
    rows = list(
        s.scalars(
            select(AccessToken).where(AccessToken.participant_id.in_(participant_ids), AccessToken.revoked_at.is_(None))
        )
    )
    for row in rows:
        row.revoked_at = now
    return len(rows)


def _check_group_sizes(rows: list[RosterRow], crow: Course, where: str) -> None:
    """More participants in a group than the course file plans seats for is refused."""
    planned = {g["name"]: g["count"] for g in (crow.summary or {}).get("groups", ())}
    counts: dict[str, int] = {}
    for r in rows:
        if r.group is not None:
            counts[r.group] = counts.get(r.group, 0) + 1
    for group, n in counts.items():
        if group in planned and n > planned[group]:
            raise InputError(
                f"{n} participants in group {group!r}, the course file plans {planned[group]} seats",
                where=where,
                fix="raise the group's count in the course file (and create the course again) or drop rows",
            )


_ROSTER_FIELDS = ("key", "name", "group_name", "unix_user", "ssh_key")


def _apply_roster(s: Session, crow: Course, rows: list[RosterRow], where: str, actor: str) -> RosterReport:
    now = datetime.now(UTC)
    stored = {p.email: p for p in s.scalars(select(Participant).where(Participant.course_id == crow.id)) if p.email}
    keys = {p.key: p for p in s.scalars(select(Participant).where(Participant.course_id == crow.id))}
    changes: list[RosterChange] = []
    for r in rows:
        values = {"key": r.key, "name": r.name, "group_name": r.group, "unix_user": r.unix_user, "ssh_key": r.ssh_key}
        p = stored.get(r.email)
        other = keys.get(r.key)
        if other is not None and other is not p:
            raise InputError(
                f"key: {r.key!r} belongs to another participant ({other.email})",
                where=f"{where}:{r.line}",
                fix="give this row its own key column value",
            )
        if p is None:
            p = Participant(course_id=crow.id, email=r.email, created_at=now, updated_at=now, **values)
            s.add(p)
            keys[r.key] = p
            changes.append(RosterChange(r.key, r.email, "added", ()))
            continue
        changed = tuple(f for f in _ROSTER_FIELDS if getattr(p, f) != values[f])
        if changed:
            keys.pop(p.key, None)
            for f in changed:
                setattr(p, f, values[f])
            p.updated_at = now
            keys[r.key] = p
            changes.append(
                RosterChange(r.key, r.email, "updated", tuple("group" if f == "group_name" else f for f in changed))
            )
        else:
            changes.append(RosterChange(r.key, r.email, "unchanged", ()))
    try:
        s.flush()
    except IntegrityError:
        raise InputError(
            "two participants would share a key or email",
            where=where,
            fix="check the key, email and unix_user columns",
        ) from None
    listed = {r.email for r in rows}
    absent = tuple(sorted(p.key for e, p in stored.items() if e not in listed))
    count = {a: sum(1 for c in changes if c.action == a) for a in ("added", "updated", "unchanged")}
    _log(s, crow.key, actor, "roster.import", detail={"file": where, **count, "absent": list(absent)})
    return RosterReport(crow.key, count["added"], count["updated"], count["unchanged"], tuple(changes), absent)
