"""The one store path for seat delivery: state, access details and readiness, each with an events row.

Engines, ``seats connect``, ``seats check`` and the portal's seat editor all call these functions
(through ``store.delivery``), so a new engine never
needs its own state code. Each call is one transaction on the store's writer session; a call that
would change nothing writes nothing (re-running ``gpuseat host up`` leaves no trace).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from types import EllipsisType
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

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

__all__ = [
    "access_of",
    "apply_seat_change",
    "check_access",
    "checked_since",
    "readiness_of",
    "record_delivery",
    "record_readiness",
]


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


#: the commands an engine puts in a way in that are no ``ssh``: Slurm's ``srun`` in the course partition
#: (and session), Kubernetes' namespace switch (engines/slurm, engines/kubernetes), names only
_ENGINE_COMMANDS = {
    "slurm": re.compile(
        r"srun -p [A-Za-z0-9][A-Za-z0-9_.-]{0,62}(?: --reservation=[A-Za-z0-9][A-Za-z0-9_.-]{0,62})? "
        r"--gres=gpu:1 --pty bash",
        re.ASCII,
    ),
    "kubernetes": re.compile(r"kubectl config set-context --current --namespace=[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"),
}


def check_access(data: Any, *, seat: str) -> Any:
    """``data`` when it is a way in gpuseat makes (``Access.to_dict()``): host, port, user, jump host, URL, notes,
    device and holder by the rules ``seats connect`` and the engines follow, else a ValueError naming the seat and
    the field (an export's ``access``); its command is the one gpuseat builds (see below), whatever it said."""
    from gpuseat.core.delivery import ssh_command
    from gpuseat.core.hosts import check_host, jump_target
    from gpuseat.core.logins import UNIX_USER
    from gpuseat.core.readiness import ACCESS_KINDS
    from gpuseat.core.roster import PARTICIPANT_KEY
    from gpuseat.safe_text import check_note
    from gpuseat.store.specs import _device
    from gpuseat.urls import http_url

    def bad(name: str, what: str, fix: str = "correct it or leave it out") -> ValueError:
        got = repr(data.get(name))
        return ValueError(f"seat {seat!r}: access.{name} {got[:80]}: {what}; {fix}")

    if data is None:
        return None
    if not isinstance(data, dict):
        raise ValueError(f"seat {seat!r}: access is not an object; give the way in as `course export` writes it")
    if data.get("kind") not in ACCESS_KINDS:
        raise bad("kind", "is not a kind of way in", f"use one of {', '.join(ACCESS_KINDS)}")
    for name in ("host", "user", "jump_host", "command", "url", "device_uuid", "holder"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise bad(name, "is not text")
    port = data.get("port")
    if port is not None and (type(port) is not int or not 0 < port < 65536):
        raise bad("port", "is not a TCP port", "give a port between 1 and 65535")
    notes = data.get("notes") or []
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise bad("notes", "is not a list of text")
    user, host, jump, url = data.get("user"), data.get("host"), data.get("jump_host"), data.get("url")
    if user is not None and not UNIX_USER.fullmatch(user):
        raise bad("user", "is not a Unix user name", "use a login such as 'alice'")
    if data.get("holder") is not None and not PARTICIPANT_KEY.fullmatch(data["holder"]):
        raise bad("holder", "is not a participant's key")
    try:
        _device(data.get("device_uuid"))
    except ValueError as exc:
        raise bad("device_uuid", str(exc)) from None
    name = "host"
    try:  # each by its own rule, as seats connect --ssh/--jump/--url/--note checks it
        if host is not None:
            check_host(host, field=name)
        name = "jump_host"
        if jump is not None:
            jump_target(jump, field=name)
        name = "url"
        if url is not None:
            check_host(str(urlsplit(http_url(url, where=name)).hostname), field=name)
        name = "notes"
        for note in notes:
            check_note(note, where=name)
    except InputError as exc:
        raise bad(name, exc.what, exc.fix or "correct it") from None
    # the command is derived data, never taken as it came: the one gpuseat builds from the checked host, user,
    # port and jump host; an engine's own (Slurm's srun, Kubernetes' kubectl) when it has that engine's exact
    # shape; else none (an older gpuseat's wording, or an edited archive's `; curl …`) until the engine records
    # the seat's way in again at its next pass
    command = data.get("command")
    engine = _ENGINE_COMMANDS.get(data["kind"])
    if engine is not None:
        command = command if command is not None and engine.fullmatch(command) else None
    elif command is not None:
        command = ssh_command(host, user, port, jump) if host and data["kind"] in ("ssh", "vm") else None
    return {**data, "command": command}
