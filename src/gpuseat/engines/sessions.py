"""Ready before every session: the one rule by which every engine checks its seats before a lab session,
so an organizer sees a broken seat on the overview before the session starts, whatever delivers it.

- From ``[policy] lead_minutes`` before the next lab session (course ``[schedule]``), each running held
  seat is checked once as its participant (``seat.check``: the engine's ``probe``, what ``gpuseat seats
  check`` does) and the result stored with the seat (``store.delivery.record_readiness``).
- A ready seat is not checked again before that session; a broken one again every :data:`RECHECK` until
  the session starts (someone may fix it); a seat that changed hands since its check is checked again, as
  its new holder.
- Never for a seat that is stopped (by its holder, or for hours outside the lead time), while the course's
  access hours are closed, during a session, or with no session near.
- With a course webhook, the pass that checked posts the session's broken seats (``session.report``),
  again only when that list changed.

Sessions and ``now`` are those of :func:`gpuseat.engines.hours.read` (the store's clock unless the pass
was given a time), and so is when each seat was last checked: the time the store recorded the check
(``store.delivery.checked_since``), not its ``checked_at`` (the clock of the machine that probed). A clock
stepped back after a check then neither keeps a broken seat from its recheck (the check looked an hour
in the future) nor, stepped forward, checks every seat again (each check looked a day old).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpuseat.core.readiness import Readiness
from gpuseat.core.seating import AGENT_ACTOR
from gpuseat.engines import course_webhook
from gpuseat.errors import GpuseatError, NotFound

if TYPE_CHECKING:
    from gpuseat.engines.base import CourseState, Step, StepEngine
    from gpuseat.engines.hours import CourseHours

#: a seat found broken before a session is checked again this much later (at the agent's next pass)
RECHECK = timedelta(minutes=4)
#: the steps of this module (each engine's ``do`` hands them to :func:`do`)
SESSION_STEPS = ("seat.check", "session.report")


class SessionChecks:
    """The checks before the next lab session in one pass of one engine: :meth:`check` for each running
    held seat, then :meth:`report` once."""

    def __init__(
        self,
        engine: StepEngine[Any],
        course: CourseState,
        ledger: CourseHours | None,
    ) -> None:
        """Checks are timed by the store, on the pass's clock (never this machine's)."""
        self.engine = engine
        sessions = ledger.sessions if ledger is not None else None
        due = sessions is not None and sessions.current is None and course.closed is None
        due = due and course.course is not None and not course.archived
        #: the next session's start (None: no check in this pass)
        self.starts = sessions.upcoming if sessions is not None and due else None
        self.now = ledger.now if ledger is not None else datetime.now(UTC)
        self.policies = sessions.policies if sessions is not None else {}
        self.last: dict[str, dict[str, Any]] = {}
        #: when each seat was last checked within the longest lead before the session (the store's clock)
        self.checked: dict[str, datetime] = {}
        if self.starts is not None and self.now >= self.starts - self._lead():  # (no read while none is near)
            self.last = engine.store.delivery.readiness_of(engine.course)
            self.checked = engine.store.delivery.checked_since(engine.course, self.starts - self._lead())
        #: the longest lead of a seat checked in this pass (None: none checked)
        self.lead: float | None = None

    def check(self, seat: str, participant: str) -> Step | None:
        """``seat.check`` of a running held seat, when one is due (see the module docstring)."""
        if self.starts is None:
            return None
        lead = float(self.policies.get(participant, {}).get("lead_minutes") or 0)
        since = self.starts - timedelta(minutes=lead)
        if self.now < since:
            return None
        at, last = self.checked.get(seat), self.last.get(seat) or {}
        if at is not None and at >= since and last.get("participant") == participant:  # (a new holder: again)
            if last.get("state") == "ready":
                return None
            if self.now - at < RECHECK:
                return None
        self.lead = max(self.lead or 0.0, lead)
        why = f"the session at {self.starts:%H:%M} UTC starts within {lead:g} min: check the seat as {participant}"
        return self.engine._step("seat.check", seat, why, "record", participant=participant)

    def _lead(self) -> timedelta:
        """The longest lead of any participant: how far before the session a check can count."""
        return timedelta(minutes=max((float(p.get("lead_minutes") or 0) for p in self.policies.values()), default=0))

    def plan(self, running: Mapping[str, str]) -> list[Step]:
        """The checks due for ``running`` (seat key → its holder's key: the held seats that run once this
        pass is done), then the report of them: what an engine adds at the end of its plan."""
        steps = [c for seat, who in sorted(running.items()) if (c := self.check(seat, who)) is not None]
        report = self.report(running)
        return steps if report is None else [*steps, report]

    def report(self, held: Iterable[str]) -> Step | None:
        """``session.report`` after this pass's checks (None: nothing checked, or no course webhook);
        ``held`` are the seats this engine delivers, whose last checks the body counts."""
        if self.lead is None or self.starts is None:
            return None
        url = course_webhook.webhook_of(self.engine.store, self.engine.course)
        if url is None:
            return None
        since = self.starts - timedelta(minutes=self.lead)  # on the store's clock, as the checks are timed
        why = "the broken seats, before the session, to the course webhook"
        target = f"session {self.starts:%Y-%m-%d %H:%M} UTC"
        starts = self.starts.isoformat()
        return self.engine._step("session.report", target, why, "record", url=url, starts=starts,
                                 since=since.isoformat(), held=sorted(held))  # fmt: skip


def do(engine: StepEngine[Any], step: Step) -> str | None:
    """Carry out ``seat.check`` (probe, store the result) or ``session.report`` (post the broken seats)."""
    if engine.runner.dry_run:
        return None
    return _check(engine, step) if step.action == "seat.check" else _report(engine, step)


def _check(engine: StepEngine[Any], step: Step) -> str | None:
    """Probe the seat as its holder (what ``seats check`` does) and store the result: a probe that
    cannot run makes the seat broken with why, as ``seats check`` says it."""
    seat = engine.store.seats.get_seat(engine.course, step.target)
    if seat.participant is None:
        return None
    try:  # the holder alone: the whole roster, read for each of 1,000 checks, was most of a pass's time
        holder = engine.store.roster.find_participant(engine.course, seat.participant)
    except NotFound:
        return None
    try:
        result = engine.probe(seat, holder)
    except GpuseatError as exc:
        result = Readiness(engine.course, seat.key, seat.participant, "broken", exc.what, "", (), datetime.now(UTC),
                           engine.name)  # fmt: skip
    engine.store.delivery.record_readiness([result], actor=AGENT_ACTOR)
    return None if result.state == "ready" else f"{step.target} is broken before the session: {result.reason}"


def _report(engine: StepEngine[Any], step: Step) -> str | None:
    """Post the seats checked for the coming session, naming the broken ones with the reason (again
    only when that list changed)."""
    d = step.data
    since = datetime.fromisoformat(str(d["since"]))
    checks = engine.store.delivery.readiness_of(engine.course)
    timed = engine.store.delivery.checked_since(engine.course, since)  # the store's clock, as ``since``
    seen = {k: v for k, v in checks.items() if k in d["held"] and k in timed}
    broken = [{"seat": k, "participant": v.get("participant"), "reason": v.get("reason")}
              for k, v in sorted(seen.items()) if v.get("state") != "ready"]  # fmt: skip
    body = {"event": "session.check", "course": engine.course, "engine": engine.name, "host": engine.host,
            "session_starts": d["starts"], "checked": len(seen), "broken": broken}  # fmt: skip
    once = ("session", f"{engine.course}/{engine.name}/{engine.host}/{d['starts']}")
    queued = course_webhook.post(str(d["url"]), body, once=once)
    return f"{len(broken)} broken of {len(seen)} posted" if queued else "unchanged since the last post"
