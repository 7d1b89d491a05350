"""Seat hours as the store reads them: each participant's held time, run requests and ledger against the course
file's access windows and lab sessions (rules in :mod:`gpuseat.core.selfservice`), in as few statements as a
participant page can afford. Moved out of :mod:`gpuseat.store.requests`, which writes the requests."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from functools import cache
from typing import Any, cast

from sqlalchemy import Float, Select, bindparam, literal_column, select

from gpuseat.core import selfservice
from gpuseat.core.intervals import Interval
from gpuseat.core.selfservice import Hours
from gpuseat.db.models import Assignment, CourseRecord, Event, Participant, Seat, SeatHours, SeatRequest
from gpuseat.store.rows import clock_sql
from gpuseat.store.views import _utc


def _timelines(
    s: Any, crow: CourseRecord, participant_id: int | None = None
) -> dict[str, list[tuple[datetime, str, str | None]]]:
    out: dict[str, list[tuple[datetime, str, str | None]]] = {}
    q = _timeline_query()
    params: dict[str, Any] = {"course_id": crow.id}
    if participant_id is not None:
        q, params = _one_timeline_query(), {**params, "participant_id": participant_id}
    for who, at, action, reason in s.connection().execute(q, params):  # columns: no ORM loading
        out.setdefault(who, []).append((cast(datetime, _utc(at)), action, reason))
    return out


@cache
def _timeline_query() -> Select[str, datetime | None, str, str | None]:
    """Done run requests (start, stop, …) of a course (bound ``course_id``), oldest first; built once."""
    return (
        select(Participant.key, SeatRequest.done_at, SeatRequest.action, SeatRequest.reason)
        .join(Participant, Participant.id == SeatRequest.participant_id)
        .where(
            SeatRequest.course_id == bindparam("course_id"),
            SeatRequest.state == "done",
            SeatRequest.action.in_(tuple(selfservice.RUN_ACTIONS)),
        )
        .order_by(SeatRequest.done_at, SeatRequest.id)
    )


@cache
def _one_timeline_query() -> Select[str, datetime | None, str, str | None]:
    """:func:`_timeline_query` of one participant (bound ``participant_id``): every participant page runs it."""
    return _timeline_query().where(SeatRequest.participant_id == bindparam("participant_id"))


@cache
def _held_query(one: bool, dialect: str) -> Select[int, datetime, datetime | None, float]:
    """Every assignment of a course's seats (bound ``course_id``; ``one``: of one ``participant_id``), each
    row with the database's clock (seconds since the epoch): seat hours count up to it, read in the same
    statement (every participant page runs this one)."""
    q = (
        select(
            Assignment.participant_id,
            Assignment.valid_from,
            Assignment.valid_to,
            literal_column(clock_sql(dialect), type_=Float).label("now"),
        )
        .join(Seat, Seat.id == Assignment.seat_id)
        .where(Seat.course_id == bindparam("course_id"))
    )
    return q.where(Assignment.participant_id == bindparam("participant_id")) if one else q


@cache
def _ledger_query(one: bool) -> Select[int, str, float]:
    """The seat-hours ledger of a course, (participant id, kind, hours) in order (bound ``course_id``;
    ``one``: of one ``participant_id``)."""
    q = (
        select(SeatHours.participant_id, SeatHours.kind, SeatHours.hours)
        .where(SeatHours.course_id == bindparam("course_id"))
        .order_by(SeatHours.id)
    )
    return q.where(SeatHours.participant_id == bindparam("participant_id")) if one else q


def _hours(
    s: Any, crow: CourseRecord, now: datetime | None, one: Participant | None, timelines: dict[str, list[Any]]
) -> dict[str, Hours]:
    """Seat hours by participant key (``one``: only theirs), with ``timelines`` read by the caller, at
    ``now`` (None: the database's clock, read with the assignments)."""
    open_, exempt, file = _course_windows(crow)
    params: dict[str, Any] = {"course_id": crow.id}
    if one is not None:
        params["participant_id"] = one.id
    held: dict[int, list[Interval]] = {}
    conn = s.connection()  # columns only: Core rows, no ORM loading (every participant page runs these)
    assigned = conn.execute(_held_query(one is not None, conn.dialect.name), params).all()
    when = now
    if when is None:
        # no seat ever held: nothing ran, and no hour depends on the time (nothing counts against it)
        when = datetime.fromtimestamp(float(assigned[0][3]), UTC) if assigned else datetime.now(UTC)
    for pid, start, end, _now in assigned:
        held.setdefault(pid, []).append((cast(datetime, _utc(start)), _utc(end) or when))
    ledger: dict[int, list[tuple[str, float]]] = {}
    for pid, kind, hours in conn.execute(_ledger_query(one is not None), params):
        ledger.setdefault(pid, []).append((kind, hours))
    out = {}
    people: Any = (
        [(one.id, one.key, one.group_name)]
        if one is not None
        else conn.execute(
            select(Participant.id, Participant.key, Participant.group_name).where(Participant.course_id == crow.id)
        )
    )
    quotas: dict[str | None, float | None] = {}  # by group: the course file's quota, read once per group
    for pid, key, group in people:
        rows = ledger.get(pid, [])
        own = [hours for kind, hours in rows if kind == "quota"]
        if not own and group not in quotas:
            quotas[group] = _quota(file, group)
        quota = own[-1] if own else quotas[group]
        topups = sum(hours for kind, hours in rows if kind == "topup")
        timeline = timelines.get(key, [])
        mine = held.get(pid, [])
        runs = selfservice.running_intervals(mine, timeline, when)
        running_now = any(end >= when for _b, end in mine) and selfservice.run_state(timeline).running
        out[key] = selfservice.hours_of(quota, topups, runs, open_, exempt, when, running_now=running_now)
    return out


def _idle_warning(
    s: Any, crow: CourseRecord, p: Participant, a: Assignment | None, timeline: list[Any] | None
) -> tuple[datetime, str] | None:
    """The seat's last idle warning since it last started (``timeline``: the participant's, when read)."""
    row = s.execute(
        select(Event.at, Event.detail)
        .where(Event.course_key == crow.key, Event.participant == p.key, Event.action == "seat.idle.warned")
        .order_by(Event.id.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    at = cast(datetime, _utc(row[0]))
    if timeline is None:
        timeline = _timelines(s, crow, p.id).get(p.key, [])
    started = max([w for w, action, _ in timeline if selfservice.RUN_ACTIONS.get(action)], default=None)
    if (started is not None and at < started) or (a is not None and at < cast(datetime, _utc(a.valid_from))):
        return None
    return at, str((row[1] or {}).get("text") or "")


#: a course's parsed file and windows by its stored text and zone: they change only with the course row
_WINDOWS: dict[tuple[str | None, str], tuple[list[Interval] | None, list[Interval], Any]] = {}


def _course_windows(crow: CourseRecord) -> tuple[list[Interval] | None, list[Interval], Any]:
    """(access intervals, lab sessions, course file) of ``crow``, parsed once per distinct text and zone."""
    key = (crow.source_text, crow.timezone)
    hit = _WINDOWS.get(key)
    if hit is None:
        file = _course_file(crow)
        open_, exempt = _windows(crow, file)
        if len(_WINDOWS) > 256:
            _WINDOWS.clear()
        hit = _WINDOWS[key] = (open_, exempt, file)
    return hit


def _course_file(crow: CourseRecord) -> Any:
    from gpuseat.core.course import Course as CourseFile

    if not crow.source_text:
        return None
    try:
        return CourseFile.model_validate(tomllib.loads(crow.source_text))
    except ValueError:
        return None


def _quota(file: Any, group: str | None) -> float | None:
    if file is None:
        return None
    value = file.policy_for(group)["quota_hours"]
    return None if value is None else float(value)


def _windows(crow: CourseRecord, file: Any) -> tuple[list[Interval] | None, list[Interval]]:
    """(access intervals, None when always open; lab sessions, exempt from hours) in UTC."""
    if file is None:
        return None, []
    from zoneinfo import ZoneInfo

    tz = ZoneInfo(crow.timezone)
    sched = file.schedule

    def utc(xs: list[tuple[datetime, datetime]]) -> list[Interval]:
        return [(a.replace(tzinfo=tz).astimezone(UTC), b.replace(tzinfo=tz).astimezone(UTC)) for a, b in xs]

    open_ = None if sched.always_on else utc(sched.access_intervals())
    exempt = utc(sched.session_intervals()) if sched.has_sessions else []
    return open_, exempt
