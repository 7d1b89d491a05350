"""Row helpers used inside one session of the course store: lookups with clear errors, row → view."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cache
from operator import attrgetter
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Select, and_, bindparam, func, inspect, or_, select, text
from sqlalchemy.orm import Session

from gpuseat.core.seating import misfit, preference
from gpuseat.db.models import Assignment, CourseRecord, Event, Participant, Seat
from gpuseat.errors import InputError, NotFound, did_you_mean
from gpuseat.store.views import SEAT_COLUMNS, AssignmentView, ParticipantView, SeatView, _utc

if TYPE_CHECKING:  # types here only: the course file's models are loaded by those who parse one
    from gpuseat.core.course import Course as CourseFile
    from gpuseat.core.needs import SeatNeed

DEFAULT_ACTOR = "gpuseat"
#: A clock behind the stored times by more than this (seconds) stepped back: an events row says so. Less is
#: ordinary between concurrent writers (each takes its time before it gets the write lock).
STEP_S = 1.0


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
            f"unknown time zone {name!r}", where="timezone", fix="use an IANA name like Europe/Berlin"
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


def _group_names(crow: CourseRecord) -> tuple[str, ...]:
    return tuple(g["name"] for g in (crow.summary or {}).get("groups", ()))


def _needs(crow: CourseRecord) -> dict[str, SeatNeed]:
    from gpuseat.core.needs import SeatNeed  # Pydantic: only for placing people on seats

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


def no_course(key: str, known: Sequence[str]) -> NotFound:
    """The one answer to an unknown course key (the ORM's lookup and the claim's SQL both give it)."""
    return NotFound(
        f"no course {key!r}.{did_you_mean(key, known)}",
        where="course",
        fix=f"one of: {', '.join(known)}" if known else "create one: gpuseat course create COURSE.toml",
    )


def which_course(keys: Sequence[str]) -> InputError:
    """The one answer when no course is named and the store holds none or several (``keys``: the first 11)."""
    if not keys:
        return InputError("no course yet", where="course", fix="create one: gpuseat course create COURSE.toml")
    return InputError(
        f"{'more than 10' if len(keys) > 10 else len(keys)} courses: {', '.join(keys[:10])}",
        where="course",
        fix="name the course by its key (--course KEY on the command line)",
    )


def _course(s: Session, key: str | None) -> CourseRecord:
    if key is not None:
        row = s.scalar(select(CourseRecord).where(CourseRecord.key == key))
        if row is None:
            raise no_course(key, list(s.scalars(select(CourseRecord.key))))
        return row
    rows = list(s.scalars(select(CourseRecord).order_by(CourseRecord.key).limit(11)))
    if len(rows) == 1:
        return rows[0]
    raise which_course([r.key for r in rows])


def _not_in_course(s: Session, crow: CourseRecord, kind: type[Participant | Seat], name: str, fix: str) -> NotFound:
    """The one answer to a participant or seat the course does not have, with the closest of its keys."""
    what = "participant" if kind is Participant else "seat"
    known = list(s.scalars(select(kind.key).where(kind.course_id == crow.id)))
    return NotFound(f"no {what} {name!r} in course {crow.key!r}.{did_you_mean(name, known)}", where=what, fix=fix)


def _participant(s: Session, crow: CourseRecord, who: str) -> Participant:
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
        fix = "give a participant's key, email or Unix user (gpuseat roster import adds them)"
        raise _not_in_course(s, crow, Participant, who, fix=fix)
    return row


def _holding() -> Select[Participant, Seat, Assignment]:
    """Participants with the seat and assignment each holds now (outer joins: a seatless one too)."""
    return (
        select(Participant, Seat, Assignment)
        .outerjoin(Assignment, and_(Assignment.participant_id == Participant.id, Assignment.valid_to.is_(None)))
        .outerjoin(Seat, Seat.id == Assignment.seat_id)
    )


#: the tables a participant page's holding row carries, in order (see :func:`_page_holding`)
_PAGE_TABLES: tuple[type[Any], ...] = (Participant, Seat, Assignment, CourseRecord)


@cache
def _page_holding() -> Select[Any]:
    """:func:`_holding` of one participant by course and participant key (bound ``course``, ``who``), with
    the course row: every mapped column of the four tables, labelled ``<table>__<attribute>``, run as a Core
    statement (columns, no ORM loading) and built once: a participant page runs it on every view."""
    columns = [
        getattr(model, attr.key).label(f"{model.__tablename__}__{attr.key}")
        for model in _PAGE_TABLES
        for attr in inspect(model).column_attrs
    ]
    return (
        select(*columns)
        .select_from(Participant)
        .outerjoin(Assignment, and_(Assignment.participant_id == Participant.id, Assignment.valid_to.is_(None)))
        .outerjoin(Seat, Seat.id == Assignment.seat_id)
        .join(CourseRecord, CourseRecord.id == Participant.course_id)
        .where(CourseRecord.key == bindparam("course"), Participant.key == bindparam("who"))
    )


@cache
def _page_spans() -> list[tuple[int, tuple[str, ...]]]:
    """Where each table's columns start in :func:`_page_holding`'s row, and their attribute names."""
    spans, start = [], 0
    for model in _PAGE_TABLES:
        names = tuple(attr.key for attr in inspect(model).column_attrs)
        spans.append((start, names))
        start += len(names)
    return spans


def _course_participant_and_seat(
    s: Session, course: str | None, who: str
) -> tuple[CourseRecord, Participant, Seat | None, Assignment | None]:
    """:func:`_course` and :func:`_participant_and_seat` in one query when both keys are exact (a
    participant's page, by the keys of their link); otherwise, or when not found, as those two do.

    The exact-keys answer is read-only: each row is a plain object with the model's attribute names and
    values (no session, no change tracking), which is all a page reads."""
    if course is not None:
        row = s.connection().execute(_page_holding(), {"course": course, "who": who}).first()
        if row is not None:
            who_row, seat_row, held_row, course_row = (
                SimpleNamespace(**dict(zip(names, row[start : start + len(names)], strict=True)))
                for start, names in _page_spans()
            )
            held = seat_row.id is not None
            return (
                cast(CourseRecord, course_row),
                cast(Participant, who_row),
                cast(Seat, seat_row) if held else None,
                cast(Assignment, held_row) if held else None,
            )
    crow = _course(s, course)
    return (crow, *_participant_and_seat(s, crow, who))


def _participant_and_seat(
    s: Session, crow: CourseRecord, who: str
) -> tuple[Participant, Seat | None, Assignment | None]:
    """The participant with the seat and assignment they hold now, in one query."""
    row = s.execute(
        _holding()
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


def _people(s: Session, crow: CourseRecord, who: Sequence[str] | None) -> list[Participant]:
    if who is None:
        return list(s.scalars(select(Participant).where(Participant.course_id == crow.id).order_by(Participant.key)))
    return [_participant(s, crow, w) for w in who]


def _seat(s: Session, crow: CourseRecord, key: str, *, lock: bool = False) -> Seat:
    q = select(Seat).where(Seat.course_id == crow.id, Seat.key == key)
    row = s.scalar(q.with_for_update() if lock else q)
    if row is None:
        raise _not_in_course(s, crow, Seat, key, fix="gpuseat seats status lists the seats")
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
        p.id,
    )


def _iso(value: datetime | None) -> str | None:
    """A stored time as ISO 8601 text, naive (SQLite) read as UTC."""
    return None if value is None else (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()


def participant_record(p: Participant) -> dict[str, Any]:
    """A participant row as plain JSON: what an export's ``participants.json`` holds and a removal's event keeps."""
    fields = {"key": p.key, "name": p.name, "email": p.email, "group": p.group_name, "unix_user": p.unix_user}
    return {**fields, "ssh_key": p.ssh_key, "created_at": _iso(p.created_at), "updated_at": _iso(p.updated_at)}


def _delivered(s: Session, crow: CourseRecord) -> bool:
    """Whether an engine has applied this course (its machines may have accounts and homes by login)."""
    q = select(Event.id).where(
        Event.course_key == crow.key,
        Event.action.in_(("engine.apply", "drift.reverted")),
        Event.at >= crow.created_at,
    )
    return s.scalar(q.limit(1)) is not None


#: a seat object's values in :data:`SEAT_COLUMNS` order (an ORM row or a page's plain namespace)
_seat_values = attrgetter(*SEAT_COLUMNS)


def _seat_view(course: str, x: Seat, holder: tuple[str | None, Assignment | None] | None) -> SeatView:
    who, a = holder if holder is not None else (None, None)
    since, mode = (a.valid_from, a.mode) if a is not None else (None, None)
    return SeatView.from_row(course, _seat_values(x), who, since, mode)


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
    at: datetime | None = None,
) -> None:
    s.add(
        Event(
            at=at or db_now(s),
            course_key=course,
            actor=actor[:128],
            action=action,
            participant=participant,
            seat=seat,
            detail=detail,
        )
    )


def clock_sql(dialect: str) -> str:
    """The database's clock as an SQL expression, seconds since the epoch (PostgreSQL's
    ``clock_timestamp()``; SQLite's ``'now'``, the clock of the machine that holds the file): the store's
    one clock, which agent leases, seat hours, assignment times and events rows all count on."""
    if dialect == "postgresql":
        return "extract(epoch FROM clock_timestamp())"
    return "(julianday('now') - 2440587.5) * 86400.0"


def db_now(s: Session) -> datetime:
    """The database's time (aware UTC), read once per transaction ``s``: what assignments and events rows
    are stamped with. With the portal, the agents and the CLI on other machines than PostgreSQL, one
    whose clock was hours off stamped a seat's start hours away from the seat hours' clock (a start 5 h
    ahead ran 5 h uncounted; a move 5 h behind ended the old holder's hours before they stopped)."""
    got = s.info.get("gpuseat.now")
    if got is None:
        seconds = float(s.scalar(text(f"SELECT {clock_sql(s.get_bind().dialect.name)}")))
        got = s.info["gpuseat.now"] = datetime.fromtimestamp(seconds, UTC)
    return cast(datetime, got)


def _clock(s: Session, course: str, actor: str = DEFAULT_ACTOR) -> datetime:
    """The time to store for an assignment of ``course`` that starts or ends now: the clock, but never
    before the course's last event (every assignment written has one at or after its times).

    A clock that steps back (an NTP correction, a VM restored from a snapshot) would otherwise store an
    assignment that ends before it starts, or a seat's next holder from before the last one left. The
    course's last event time is taken instead, and an events row says the clock stepped (migration
    0013's CHECK, triggers on SQLite, is the last guard behind this).
    """
    now = db_now(s)
    last = _utc(s.scalar(select(func.max(Event.at)).where(Event.course_key == course)))
    if last is None or last <= now:
        return now
    behind = (last - now).total_seconds()
    if behind <= STEP_S:  # another writer's time, taken a moment later but stored first: no step
        return last
    _log(
        s,
        course,
        actor,
        "clock.stepped",
        detail={"clock": now.isoformat(), "stored": last.isoformat(), "behind_s": round(behind, 6)},
        at=last,
    )
    return last
