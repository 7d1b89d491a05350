"""Seat requests and seat hours: what a participant (or the organizer for them) asks of their seat, and
the hours their seat has used against their quota (issue 40; rules in :mod:`gpuseat.core.selfservice`).

A request is a row, pending until the seat's engine (its agent, or ``gpuseat apply``) carries it out
and marks it done or failed with the reason; every request writes an events row, which wakes the
agent. Nothing here touches a machine.

Seat hours run on the store's one clock (the database's time, as agent leases do): the times a request
is asked and done, and the ``now`` hours are counted against, never come from the clock of the machine
that writes or reads them. A process whose clock was stepped (NTP, a wrong clock on one agent host)
would otherwise charge a running seat for the step, or put a stop before the start it follows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import func, select

from gpuseat.core import selfservice
from gpuseat.core.amounts import hours_text
from gpuseat.core.delivery import login_name
from gpuseat.core.intervals import Interval
from gpuseat.core.seating import AGENT_ACTOR
from gpuseat.core.selfservice import Hours, RunState
from gpuseat.db.models import (
    CourseRecord,
    Event,
    MinuteAggregate,
    Participant,
    Sample,
    Seat,
    SeatHours,
    SeatRequest,
)
from gpuseat.engines import registry
from gpuseat.errors import InputError
from gpuseat.safe_text import check_note
from gpuseat.store.activity import SeatDay, daily_of
from gpuseat.store.base import Concern
from gpuseat.store.hours_read import _course_windows, _hours, _idle_warning, _timelines
from gpuseat.store.rows import (
    _clock,
    _course,
    _course_participant_and_seat,
    _log,
    _participant_and_seat,
    _seat_view,
)
from gpuseat.store.views import SeatView, _utc

#: engines that carry out seat requests: every built-in engine that delivers seats (not ``manual``, nor a
#: plug-in's, whose requests nobody would carry out); the registry stays the one list of engines
SELF_SERVICE_ENGINES: tuple[str, ...] = tuple(s.name for s in registry.BUILTIN if s.target is not None)
#: a participant may make this many requests in :data:`RATE_WINDOW` (the organizer's are not counted)
RATE_LIMIT = 10
RATE_WINDOW = timedelta(minutes=10)


class RateLimited(InputError):
    """Too many requests in a short time (the portal answers 429)."""


class SeatChanged(InputError):
    """The participant holds another seat (or none) than the one the request was made for (the portal
    answers 409: reload the page)."""


@dataclass(frozen=True)
class RequestView:
    """One seat request and what became of it."""

    id: int
    course: str
    participant: str
    seat: str | None
    action: str
    state: str
    reason: str | None
    actor: str
    requested_at: datetime
    done_at: datetime | None
    key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = asdict(self)
        out["requested_at"] = self.requested_at.isoformat()
        out["done_at"] = self.done_at.isoformat() if self.done_at else None
        return out


@dataclass(frozen=True)
class PageReading:
    """A participant page's seat and controls, read in one transaction (:meth:`RequestMethods.page_of`)."""

    seat: SeatView | None
    hours: Hours | None
    requests: list[RequestView]
    idle_warning: tuple[datetime, str] | None
    run_state: RunState | None
    survey_state: str | None
    #: the seat's stored way in and last readiness check (``Access``/``Readiness.to_dict`` forms)
    access: dict[str, Any] | None = None
    readiness: dict[str, Any] | None = None
    #: the other participants' login names, read only when the stored way in names a user not theirs
    logins: frozenset[str] = frozenset()
    #: the seat's use per UTC day (:meth:`gpuseat.store.activity.Activity.daily`)
    days: list[SeatDay] = field(default_factory=list)
    #: why the course's access is closed now (the engines lock the seat then), else None
    closed: str | None = None


@dataclass(frozen=True)
class SessionPolicy:
    """Each participant's policy (by key), the lab session running now (UTC) and the next one's start."""

    policies: dict[str, dict[str, Any]]
    current: Interval | None
    upcoming: datetime | None

    def near(self, now: datetime, lead_minutes: float) -> bool:
        """True during a session and from ``lead_minutes`` before the next one starts."""
        return self.current is not None or (
            self.upcoming is not None and self.upcoming - timedelta(minutes=lead_minutes) <= now
        )


def _view(course: str, who: str, r: SeatRequest) -> RequestView:
    return RequestView(
        r.id,
        course,
        who,
        r.seat_key,
        r.action,
        r.state,
        r.reason,
        r.actor,
        cast(datetime, _utc(r.requested_at)),
        _utc(r.done_at),
        (r.payload or {}).get("key"),
    )


class Requests(Concern):
    """``store.requests``: participants' seat requests, seat hours, session policies and idle warnings."""

    def now(self) -> datetime:
        """The store's clock now (aware UTC): what seat hours are counted against (see the module doc)."""
        with self._database.read() as s:
            return self._now(s)

    def _now(self, s: Any) -> datetime:
        """The database's time in session ``s`` (the one helper agent leases use)."""
        return datetime.fromtimestamp(self._store.agents._clock(s), UTC)

    def request_seat(
        self,
        course: str | None,
        participant: str,
        action: str,
        *,
        actor: str,
        key: str | None = None,
        by_participant: bool = True,
        now: datetime | None = None,
        expect_seat: str | None = None,
    ) -> RequestView:
        """Ask for ``action`` (start, stop, restart, reset, key) on the participant's own seat.

        ``expect_seat`` (the seat the participant's page showed, "" for none) is checked in the same
        transaction as the write: a move or release that lands between the page's read and this write
        refuses the request (:class:`SeatChanged`) instead of stopping or resetting the seat held now.

        Refused (InputError, exit 2) when the participant holds no seat (a key is stored anyway), the
        seat's engine does not carry out requests, the same action is already pending, or (for the
        participant's own requests) more than :data:`RATE_LIMIT` were made in :data:`RATE_WINDOW`."""
        if action not in selfservice.ACTIONS:
            raise InputError(
                f"unknown seat action {action!r}", where="action", fix=f"one of: {', '.join(selfservice.ACTIONS)}"
            )
        line = None
        if action == "key":
            try:
                line = selfservice.check_new_key(key or "")
            except ValueError as exc:
                raise InputError(str(exc), where="ssh key", fix="paste the one line of your .pub file") from None
        with self._database.write() as s:
            when = now or self._now(s)
            crow = _writable(_course(s, course))
            p, seat, _a = _participant_and_seat(s, crow, participant)
            # one asker's requests one after another: on PostgreSQL (read committed) two tabs' stops at once
            # each saw no pending stop of the other and both were stored (and a burst passed the rate limit);
            # SQLite's writers already take turns, and it has no FOR UPDATE (nothing is sent)
            s.execute(select(Participant.id).where(Participant.id == p.id).with_for_update())
            held = seat.key if seat is not None else ""
            if expect_seat is not None and held != expect_seat:
                now_holds = f"; you now hold {held}" if held else "; you hold no seat now"
                raise SeatChanged(
                    f"this request was for seat {expect_seat or '(none)'}{now_holds}",
                    where="seat request",
                    fix="reload the page and try again",
                )
            if by_participant:
                recent = s.scalar(
                    select(func.count())
                    .select_from(SeatRequest)
                    .where(
                        SeatRequest.participant_id == p.id,
                        SeatRequest.requested_at > when - RATE_WINDOW,
                        SeatRequest.actor == actor[:128],  # the asker's own: not the organizer's, nor the agent's
                    )
                )
                if (recent or 0) >= RATE_LIMIT:
                    raise RateLimited(
                        f"{RATE_LIMIT} requests in {RATE_WINDOW.seconds // 60} minutes already",
                        where="seat request",
                        fix="wait a few minutes, then try again",
                    )
            state, reason = "pending", None
            if seat is None:
                if action != "key":
                    raise InputError(
                        f"{p.key} holds no seat", where="seat request", fix="the organizer assigns one first"
                    )
                state, reason = "done", "stored: installed when you get a seat"
            elif seat.engine not in SELF_SERVICE_ENGINES:
                if action != "key":
                    raise InputError(
                        f"seat {seat.key} is on engine {seat.engine}, which does not carry out {action} requests yet",
                        where="seat request",
                        fix="ask the organizer",
                    )
                state, reason = "done", f"stored: the {seat.engine} engine installs it"
                if seat.engine not in registry.delivering():  # manual: nothing of gpuseat's installs a key there
                    reason = f"stored: seat {seat.key} is set up by hand, not by gpuseat: give your organizer the key"
            if state == "pending" and seat is not None:  # (pending: a seat is held)
                # one pending request per action on the seat held now: one left on a seat held before a
                # move is the old seat's agent's to refuse, and must not block this seat's controls
                dup = s.scalar(
                    select(SeatRequest.id).where(
                        SeatRequest.participant_id == p.id,
                        SeatRequest.seat_key == seat.key,
                        SeatRequest.action == action,
                        SeatRequest.state == "pending",
                    )
                )
                if dup is not None:
                    raise InputError(
                        f"a {action} of {p.key}'s seat is already pending",
                        where="seat request",
                        fix="wait for it to be done (the page shows it)",
                    )
            replaced = p.ssh_key  # a roster re-import whose file still has it keeps the new key (store/roster.py)
            if line is not None:
                p.ssh_key, p.updated_at = line, when
            row = SeatRequest(
                course_id=crow.id,
                participant_id=p.id,
                seat_key=seat.key if seat is not None else None,
                action=action,
                payload={"key": line, "replaced": replaced} if line else None,
                state=state,
                reason=reason,
                actor=actor[:128],
                requested_at=when,
                done_at=when if state != "pending" else None,
            )
            s.add(row)
            s.flush()
            _log(
                s,
                crow.key,
                actor,
                "seat.request",
                participant=p.key,
                seat=row.seat_key,
                detail={"id": row.id, "action": action, "state": state},
            )
            return _view(crow.key, p.key, row)

    def seat_requests(
        self, course: str | None, *, participant: str | None = None, pending: bool = False, limit: int = 20
    ) -> list[RequestView]:
        """Requests of a course (or one participant), newest first; ``pending``: only those not done yet."""
        with self._database.read() as s:
            crow = _course(s, course)
            q = (
                select(SeatRequest, Participant.key)
                .join(Participant, Participant.id == SeatRequest.participant_id)
                .where(SeatRequest.course_id == crow.id)
            )
            if participant is not None:
                p, _seat, _a = _participant_and_seat(s, crow, participant)
                q = q.where(SeatRequest.participant_id == p.id)
            if pending:
                q = q.where(SeatRequest.state == "pending")
            q = q.order_by(SeatRequest.id.desc()).limit(max(1, min(limit, 10_000)))
            return [_view(crow.key, who, r) for r, who in s.execute(q)]

    def finish_request(
        self, course: str | None, request_id: int, *, ok: bool, reason: str | None = None, actor: str = AGENT_ACTOR
    ) -> bool:
        """Mark a pending request done or failed (False when it was not pending any more)."""
        with self._database.write() as s:
            crow = _course(s, course)
            row = s.get(SeatRequest, request_id)
            if row is None or row.course_id != crow.id or row.state != "pending":
                return False
            # never before the course's last event: a clock stepped back would sort this start before the
            # stop it follows on the seat's timeline (the seat stays stopped, its hours stop counting)
            row.state, row.reason, row.done_at = ("done" if ok else "failed"), reason, _clock(s, crow.key, actor)
            who = s.scalar(select(Participant.key).where(Participant.id == row.participant_id))
            _log(
                s,
                crow.key,
                actor,
                "seat.request.done" if ok else "seat.request.failed",
                participant=who,
                seat=row.seat_key,
                detail={"id": row.id, "action": row.action, "reason": reason},
            )
            return True

    def agent_stop(self, course: str | None, participant: str, reason: str, *, actor: str = AGENT_ACTOR) -> RequestView:
        """The agent's own stop (no hours left, idle): a done ``stop`` on the seat's timeline."""
        with self._database.write() as s:
            crow = _course(s, course)
            p, seat, _a = _participant_and_seat(s, crow, participant)
            now = _clock(s, crow.key, actor)  # after the start it stops, whatever the clock did (finish_request)
            row = SeatRequest(
                course_id=crow.id,
                participant_id=p.id,
                seat_key=seat.key if seat is not None else None,
                action="stop",
                payload={"auto": True},
                state="done",
                reason=reason,
                actor=actor[:128],
                requested_at=now,
                done_at=now,
            )
            s.add(row)
            s.flush()
            _log(s, crow.key, actor, "seat.stopped", participant=p.key, seat=row.seat_key, detail={"reason": reason})
            return _view(crow.key, p.key, row)

    # -- run state and hours ---------------------------------------------------------------------------

    def run_states(self, course: str | None) -> dict[str, RunState]:
        """Whether each participant's seat should run (from the done requests), by participant key."""
        with self._database.read() as s:
            crow = _course(s, course)
            return {k: selfservice.run_state(t) for k, t in _timelines(s, crow).items()}

    def add_seat_hours(
        self, course: str | None, participant: str, hours: float, *, kind: str = "topup", actor: str, note: str = ""
    ) -> None:
        """An organizer's top-up (hours added) or a participant's own quota (``kind="quota"``)."""
        if kind not in ("topup", "quota"):
            raise InputError(f"unknown kind {kind!r}", where="kind", fix="topup or quota")
        if not 0 <= hours <= 100_000 or hours != hours:
            raise InputError(
                f"{hours_text(hours)} is not a number of hours from 0 to 100000",
                where="hours",
                fix="give a quota, or the hours one top-up adds, from 0 to 100000",
            )
        check_note(note)  # an escape sequence was stored for `seat hours` to print, a long note cut at 500 unsaid
        with self._database.write() as s:
            crow = _writable(_course(s, course))
            p, _seat, _a = _participant_and_seat(s, crow, participant)
            s.add(
                SeatHours(
                    course_id=crow.id,
                    participant_id=p.id,
                    kind=kind,
                    hours=float(hours),
                    note=note[:500] or None,
                    actor=actor[:128],
                    at=self._now(s),
                )
            )
            _log(s, crow.key, actor, f"hours.{kind}", participant=p.key, detail={"hours": hours, "note": note[:200]})

    def seat_hours(
        self, course: str | None, *, now: datetime | None = None, participant: str | None = None
    ) -> dict[str, Hours]:
        """Every participant's seat hours (quota from the person, the group or the course; top-ups;
        hours their seat ran inside access hours and outside lab sessions), by participant key;
        ``participant``: only theirs (a participant page). ``now``: the store's clock unless given."""
        with self._database.read() as s:
            crow = _course(s, course)
            one = _participant_and_seat(s, crow, participant)[0] if participant is not None else None
            return _hours(s, crow, now, one, _timelines(s, crow, one.id if one is not None else None))

    def page_of(self, course: str | None, participant: str, *, now: datetime | None = None) -> PageReading:
        """What a participant's page shows of their seat and controls, in one read transaction (the
        registration rush opens this page first): the seat, hours, and for a seat its latest five
        requests, idle warning, run state, way in, last check and daily use (a seatless page shows none
        of these); the survey's state. ``now``: the store's clock unless given."""
        with self._database.read() as s:
            crow, p, seat, a = _course_participant_and_seat(s, course, participant)
            timeline = _timelines(s, crow, p.id)
            hours = _hours(s, crow, now, p, timeline).get(p.key)
            if seat is None:
                return PageReading(None, hours, [], None, None, crow.survey_state)
            view = _seat_view(crow.key, seat, (p.key, a))
            q = select(SeatRequest).where(SeatRequest.participant_id == p.id).order_by(SeatRequest.id.desc()).limit(5)
            requests = [_view(crow.key, p.key, r) for r in s.scalars(q)]
            mine = timeline.get(p.key, [])
            warned = _idle_warning(s, crow, p, a, mine)
            open_, _exempt, file = _course_windows(crow)
            if warned is not None and file is not None and not file.policy_for(p.group_name).get("idle_minutes"):
                warned = None  # the organizer took idle_minutes out since: no pass stops the seat for it now
            closed = None
            if open_ is not None and file is not None:  # a course that closes: the engines' rule, on the store's clock
                from gpuseat.core.window import access_now

                closed = access_now(file, crow.timezone, now or self._now(s))[0]
            state = selfservice.run_state(mine) if mine else None
            access = dict(seat.access) if seat.access else None
            user = (access or {}).get("user")
            logins: frozenset[str] = frozenset()
            if user and user != login_name(p.key, p.unix_user):  # made for someone else? (a move not applied)
                people = s.execute(
                    select(Participant.key, Participant.unix_user).where(Participant.course_id == crow.id)
                )
                logins = frozenset(login_name(k, u) for k, u in people)
            readiness = dict(seat.readiness) if seat.readiness else None
            days = daily_of(s, participant_ids=[p.id])  # their minutes, on every seat they held
            return PageReading(
                view, hours, requests, warned, state, crow.survey_state, access, readiness, logins, days, closed
            )

    # -- idle stop -------------------------------------------------------------------------------------

    def seat_policies(self, course: str | None, *, now: datetime | None = None) -> SessionPolicy:
        """Each participant's policy and where ``now`` (the store's clock unless given) stands against the
        course's lab sessions."""
        with self._database.read() as s:
            when = now or self._now(s)
            crow = _course(s, course)
            _open, exempt, file = _course_windows(crow)
            people = list(
                s.execute(select(Participant.key, Participant.group_name).where(Participant.course_id == crow.id))
            )
        if file is None:
            return SessionPolicy({}, None, None)
        current = next(((a, b) for a, b in exempt if a <= when < b), None)
        upcoming = next((a for a, _b in exempt if a > when), None)
        groups = {g: file.policy_for(g) for g in {g for _k, g in people}}  # once per group, not per participant
        return SessionPolicy({k: dict(groups[g]) for k, g in people}, current, upcoming)

    def gpu_window(self, course: str | None, since: datetime) -> dict[str, tuple[int, int | None, datetime]]:
        """Each seat's monitor readings since ``since``: (how many, the highest GPU utilisation, the first
        one's time), from the raw samples and the one-minute rollups, by seat key."""
        start = int(since.timestamp())
        out: dict[str, tuple[int, int | None, datetime]] = {}

        def merge(key: str, n: int, top: int | None, first: int) -> None:
            old = out.get(key)
            at = datetime.fromtimestamp(first, UTC)
            if old is None:
                out[key] = (n, top, at)
                return
            tops = [x for x in (old[1], top) if x is not None]
            out[key] = (old[0] + n, max(tops) if tops else None, min(old[2], at))

        with self._database.read() as s:
            crow = _course(s, course)
            key_of = {i: k for i, k in s.execute(select(Seat.id, Seat.key).where(Seat.course_id == crow.id))}
            if not key_of:
                return out
            # by seat id (the (seat_id, ts|minute) indexes): only this course's readings are read
            raw = (
                select(Sample.seat_id, func.count(), func.max(Sample.utilization_gpu), func.min(Sample.ts))
                .where(Sample.seat_id.in_(list(key_of)), Sample.ts >= start)
                .group_by(Sample.seat_id)
            )
            for seat_id, n, top, first in s.execute(raw):
                merge(key_of[cast(int, seat_id)], n, top, first)
            rolled = (
                select(
                    MinuteAggregate.seat_id,
                    func.count(),
                    func.max(MinuteAggregate.utilization_avg),
                    func.min(MinuteAggregate.minute),
                )
                .where(MinuteAggregate.seat_id.in_(list(key_of)), MinuteAggregate.minute >= start // 60)
                .group_by(MinuteAggregate.seat_id)
            )
            for seat_id, n, top, first in s.execute(rolled):
                merge(key_of[cast(int, seat_id)], n, top, first * 60)
        return out

    def idle_warning(self, course: str | None, participant: str) -> tuple[datetime, str] | None:
        """The last idle warning of the participant's seat since it last started (time, text), or None."""
        with self._database.read() as s:
            crow = _course(s, course)
            p, _seat, a = _participant_and_seat(s, crow, participant)
            return _idle_warning(s, crow, p, a, None)

    def connected(self, course: str | None) -> dict[str, datetime]:
        """When each participant was first seen logged in to their seat (``seat.connected`` events)."""
        with self._database.read() as s:
            crow = _course(s, course)
            rows = s.execute(
                select(Event.participant, func.min(Event.at))
                .where(Event.course_key == crow.key, Event.action == "seat.connected")
                .group_by(Event.participant)
            )
            return {who: cast(datetime, _utc(at)) for who, at in rows if who}

    def policy_set_at(self, course: str | None, name: str) -> dict[str, datetime]:
        """When each participant's ``[policy]`` ``name`` was last set or changed after the course was made, by
        participant key: the course's or their group's ``name`` changed (a ``course.policy`` row of
        ``/course/settings``, a ``course.update`` row), or a file given to a course made without one; or a roster
        import moved them into a group whose ``name`` differs from their old group's (in the stored file). None
        for the others: the file they have had since ``course create`` (or an import, which keeps the course's
        events) sets it, since before anyone got a seat. One read of the course's events (their
        ``(course_key, at)`` index), whatever the number of seats."""
        with self._database.read() as s:
            crow = _course(s, course)
            rows = list(
                s.execute(
                    select(Event.at, Event.action, Event.detail)
                    .where(
                        Event.course_key == crow.key,
                        Event.action.in_(("course.policy", "course.update", "roster.import")),
                    )
                    .order_by(Event.at)
                )
            )
            file = _course_windows(crow)[2] if any(a == "roster.import" for _at, a, _d in rows) else None
            people = list(
                s.execute(select(Participant.key, Participant.group_name).where(Participant.course_id == crow.id))
            )
        groups = {g for _k, g in people if g}
        last: dict[str | None, datetime] = {}  # None: every participant; else one group's
        moved: dict[str, datetime] = {}  # moved by the roster into a group of another value
        for at, action, detail in rows:
            when = cast(datetime, _utc(at))
            if action == "roster.import":
                moves = (detail or {}).get("groups")  # written by roster import; an imported export's: anything
                for who, pair in moves.items() if isinstance(moves, dict) and file is not None else ():
                    old, new = pair if isinstance(pair, list) and len(pair) == 2 else (None, None)
                    if file is None or not (isinstance(old, str | None) and isinstance(new, str | None)):
                        continue
                    if file.policy_for(old).get(name) != file.policy_for(new).get(name):
                        moved[who] = when
                continue
            changes = [c for c in (detail or {}).get("changes", [detail]) if isinstance(c, dict)]
            if any(c.get("field") == "course file" or _sets(c, ["policy", name]) for c in changes):
                last[None] = when
            for g in groups:
                if any(_sets(c, ["groups", g, "policy", name]) for c in changes):
                    last[g] = when
        found = {k: [t for t in (last.get(None), last.get(g), moved.get(k)) if t is not None] for k, g in people}
        return {k: max(times) for k, times in found.items() if times}

    def warn_idle(
        self, course: str | None, participant: str, seat: str, text: str, *, actor: str = AGENT_ACTOR
    ) -> None:
        """Write the idle warning of a seat (the page shows it; the stop comes after the grace period)."""
        with self._database.write() as s:
            crow = _course(s, course)
            _log(s, crow.key, actor, "seat.idle.warned", participant=participant, seat=seat, detail={"text": text})


def fail_pending(
    s: Any,
    crow: CourseRecord,
    why: str,
    actor: str,
    *,
    seats: list[str] | None = None,
    participants: list[int] | None = None,
) -> int:
    """End the course's pending requests (``seats``: those asked of these seats; ``participants``: those of these
    participant ids) as failed with ``why``, in the caller's transaction: no engine carries them out any more (an
    archived course, a removed seat or participant), so they would say "pending" for ever, and be carried out if
    the seat key or the course came back. Returns how many."""
    from gpuseat.store.rows import db_now

    q = select(SeatRequest, Participant.key).join(Participant, Participant.id == SeatRequest.participant_id)
    q = q.where(SeatRequest.course_id == crow.id, SeatRequest.state == "pending")
    if seats is not None:
        q = q.where(SeatRequest.seat_key.in_(seats))
    if participants is not None:
        q = q.where(SeatRequest.participant_id.in_(participants))
    rows = list(s.execute(q))
    for row, who in rows:
        row.state, row.reason, row.done_at = "failed", why, db_now(s)
        _log(s, crow.key, actor, "seat.request.failed", participant=who, seat=row.seat_key,
             detail={"id": row.id, "action": row.action, "reason": why})  # fmt: skip
    s.flush()
    return len(rows)


def _writable(crow: CourseRecord) -> CourseRecord:
    """``crow`` unless archived: seat requests and seat hours came after the archive triggers (revision
    0010), so no trigger refuses them, and a start asked of an archived course's seat was stored pending."""
    if crow.archived_at is not None:
        from gpuseat.store.claims import archived_error

        raise archived_error(crow.key)
    return crow


def _sets(change: dict[str, Any], path: list[str]) -> bool:
    """Whether one change row (``{"field", "from", "to"}``: ``policy.quota_hours``, or a whole table added or
    taken out, ``groups.night``) changes the value at ``path`` (its parts: a group's name may hold dots)."""
    for i in range(1, len(path) + 1):
        if ".".join(path[:i]) == change.get("field"):
            ends = [change.get("from"), change.get("to")]
            for part in path[i:]:
                ends = [x.get(part) if isinstance(x, dict) else None for x in ends]
            return ends[0] != ends[1]
    return False
