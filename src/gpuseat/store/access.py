"""The one store path for seat delivery: state, access details and readiness, each with an events row.

Engines, ``seats connect``, ``seats check`` and the portal's seat editor all call these functions
(through ``store.delivery``), so a new engine never
needs its own state code. Each call is one transaction on the store's writer session; a call that
would change nothing writes nothing (re-running ``gpuseat host up`` leaves no trace).
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import EllipsisType
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import func, select

from gpuseat.core.seating import transition_error
from gpuseat.db.models import Assignment, CourseRecord, Event, Participant, Seat
from gpuseat.errors import InputError, InvalidTransition
from gpuseat.store.rows import _course, _log
from gpuseat.store.views import _utc

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from gpuseat.core.readiness import Access, Readiness
    from gpuseat.store.facade import Store

__all__ = ["access_of", "apply_seat_change", "checked_since", "readiness_of", "record_delivery", "record_readiness"]


def _course_and_seat(store: Store, s: Any, course: str, seat: str) -> tuple[CourseRecord, Seat]:
    """The course and (locked) seat rows; names were checked through the store's public lookups."""
    crow = s.scalar(select(CourseRecord).where(CourseRecord.key == course))
    row = s.scalar(select(Seat).where(Seat.course_id == crow.id, Seat.key == seat).with_for_update())
    return crow, row


def record_delivery(
    store: Store,
    course: str | None,
    seat: str,
    *,
    access: Access | None = None,
    clear_access: bool = False,
    state: str | None = None,
    reason: str | None = None,
    engine_ref: str | None = None,
    actor: str = "gpuseat",
) -> bool:
    """Set a seat's access details and/or state in one transaction with one ``seat.delivery`` event.

    Returns False (and writes nothing) when the seat already looks like that.
    """
    view = store.seats.get_seat(course, seat)  # NotFound with a did-you-mean for unknown names
    with store.database.write() as s:
        crow, row = _course_and_seat(store, s, view.course, view.key)
        return apply_seat_change(
            s,
            crow,
            row,
            state=state,
            reason=reason,
            access=access,
            clear_access=clear_access,
            fields={"engine_ref": engine_ref},
            actor=actor,
        )


def apply_seat_change(
    s: Any,
    crow: CourseRecord,
    row: Seat,
    *,
    state: str | None,
    reason: str | None,
    access: Access | None = None,
    clear_access: bool = False,
    fields: dict[str, Any] | None = None,
    always: bool = False,
    action: str = "seat.delivery",
    actor: str = "gpuseat",
    holder: str | EllipsisType | None = ...,
) -> bool:
    """The one write of a seat's state, access and engine fields, with its events row (in ``s``).

    Both :func:`record_delivery` and ``store.seats.set_seat_state`` come here: the state machine is
    checked, what changed is set, and one event says what changed. Without ``always`` a call that
    changes nothing writes nothing; with it (an engine reporting the same state again) the state's
    reason and time are refreshed and logged. ``holder``: the key of the participant holding the seat,
    when the caller has read it already (a state change does not change who holds the seat).
    """
    if reason is not None and (len(reason) > 2000 or "\x00" in reason):
        raise InputError("reason too long or with NUL bytes", where="reason", fix="keep it under 2000 characters")
    new_access = None if access is None else access.to_dict()
    changes: dict[str, Any] = {}
    if clear_access and row.access is not None:
        changes["access"] = None
    elif new_access is not None and row.access != new_access:
        changes["access"] = new_access
    if state is not None and (always or row.state != state or (reason is not None and row.state_reason != reason)):
        problem = transition_error(row.state, state)
        if problem:
            raise InvalidTransition(problem, where=f"seat {row.key}", fix="request the seat again first")
        changes["state"] = state
    for name, value in (fields or {}).items():
        if value is not None and getattr(row, name) != value:
            changes[name] = value
    if not changes:
        return False
    before = row.state
    for name, value in changes.items():
        if name != "state":
            setattr(row, name, value)
    if "state" in changes:
        row.state, row.state_reason, row.state_at = state or row.state, reason, datetime.now(UTC)
    s.flush()
    detail: dict[str, Any] = {"changed": sorted(changes)}
    if "state" in changes:
        detail.update({"from": before, "to": state, "reason": reason, "engine_ref": row.engine_ref})
    if "access" in changes:
        detail["access"] = changes["access"]
    who = _holder_key(s, row) if holder is ... else holder
    _log(s, crow.key, actor, action, participant=who, seat=row.key, detail=detail)
    return True


def record_readiness(store: Store, results: list[Readiness], *, actor: str = "gpuseat") -> int:
    """Keep each seat's latest check on the seat and log one ``seat.check`` event per seat."""
    written = 0
    for r in results:
        store.seats.get_seat(r.course, r.seat)
    with store.database.write() as s:
        for r in results:
            crow, row = _course_and_seat(store, s, r.course, r.seat)
            row.readiness = r.to_dict()
            detail = {"state": r.state, "reason": r.reason, "visible": list(r.visible)}
            _log(s, crow.key, actor, "seat.check", participant=r.participant, seat=row.key, detail=detail)
            written += 1
    return written


def access_of(store: Store, course: str | None) -> dict[str, dict[str, Any]]:
    """Seat key → stored access (``Access.to_dict`` form) for every seat that has one (one read)."""
    with store.database.read() as s:
        cid = _course(s, course).id
        rows = s.execute(select(Seat.key, Seat.access).where(Seat.course_id == cid, Seat.access.is_not(None)))
        return {k: dict(v) for k, v in rows if v}


def readiness_of(store: Store, course: str | None) -> dict[str, dict[str, Any]]:
    """Seat key → the last readiness check (``Readiness.to_dict`` form) for every checked seat (one read)."""
    with store.database.read() as s:
        cid = _course(s, course).id
        rows = s.execute(select(Seat.key, Seat.readiness).where(Seat.course_id == cid, Seat.readiness.is_not(None)))
        return {k: dict(v) for k, v in rows if v}


def checked_since(store: Store, course: str | None, since: datetime) -> dict[str, datetime]:
    """Seat key → when its last readiness check since ``since`` was stored, on the store's clock (the
    ``seat.check`` events row written with it), whatever the clock of the machine that probed: a check
    made on a clock an hour ahead is not "from the future", nor one a day behind from yesterday (one read)."""
    with store.database.read() as s:
        key = _course(s, course).key
        rows = s.execute(
            select(Event.seat, func.max(Event.at))
            .where(Event.course_key == key, Event.action == "seat.check", Event.at >= since.astimezone(UTC))
            .group_by(Event.seat)
        )
        return {seat: cast(datetime, _utc(at)) for seat, at in rows if seat}


def _holder_key(s: Session, row: Seat) -> str | None:
    return s.scalar(
        select(Participant.key)
        .join(Assignment, Assignment.participant_id == Participant.id)
        .where(Assignment.seat_id == row.id, Assignment.valid_to.is_(None))
    )
