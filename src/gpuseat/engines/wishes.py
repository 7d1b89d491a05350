"""What a holder's pending requests, run state and seat hours want of their seat in one pass: the part of
participant self-service that the engines whose "stopped" is one state of a remote object (a cloud
cluster, a Kubernetes namespace) share, so each of them writes only what its stop, start and records are.

One :class:`Reading` per plan (the course's pending requests, run states and hours), then per holder a
:class:`Wish`: whether the seat runs after this pass, why not, the note its way in carries while it is
stopped, and the ``request.record`` / ``seat.stop`` steps that end this pass. The rules themselves are
:func:`gpuseat.engines.base.plan_holder_requests` (requests) and :mod:`gpuseat.engines.hours` (hours).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuseat.core.selfservice import RunState
from gpuseat.engines import hours as seat_hours
from gpuseat.engines.base import (
    RUN_REQUESTS,
    Changes,
    CourseState,
    Step,
    StepEngine,
    plan_holder_requests,
    refused_outcome,
)
from gpuseat.engines.base import stale_requests as _stale

if TYPE_CHECKING:
    from gpuseat.store import ParticipantView
    from gpuseat.store.requests import RequestView

#: the run requests that remake a running seat, strongest first (a reset also covers a restart)
FRESH = ("reset", "restart")


@dataclass(frozen=True)
class Reading:
    """The course's pending requests, run states and seat hours, read once per plan."""

    pending: list[RequestView]
    states: dict[str, RunState]
    hours: seat_hours.CourseHours | None


@dataclass
class Wish:
    """What one holder's requests, run state and hours want of their seat in this pass."""

    #: the seat runs once this pass is done
    runs: bool
    #: why it is stopped (the why of the engine's stop steps)
    why: str = ""
    #: the note of the seat's way in while it is stopped (None: it runs)
    stopped: str | None = None
    #: the strongest of :data:`FRESH` that runs in this pass (the engine may set its own, e.g. "key")
    fresh: str | None = None
    #: the run requests carried out in this pass, oldest first
    ran: list[str] = field(default_factory=list)
    #: the ``request.record`` (and ``seat.stop``) steps, planned after the seat's own steps
    steps: list[Step] = field(default_factory=list)


def read_requests(engine: StepEngine[Any], course: CourseState, seats: set[str], held: bool) -> Reading | None:
    """The pending requests on these seats, every holder's run state and (``held``: a seat is held) their
    hours (None: an archived or deleted course, whose requests nobody carries out)."""
    if not seats or course.course is None or course.archived:
        return None
    ledger = seat_hours.read(engine.store, engine.course, course.now) if held else None
    return Reading(engine.pending_requests(seats), engine.store.requests.run_states(engine.course), ledger)


def stale_steps(engine: StepEngine[Any], reading: Reading, holders: Mapping[str, ParticipantView]) -> list[Step]:
    """A ``request.record`` that fails each pending request whose asker holds its seat no more."""
    return [engine._request_step(r, why, seat=r.seat) for r, why in _stale(reading.pending, holders)]


def plan_wish(
    engine: StepEngine[Any],
    course: CourseState,
    reading: Reading,
    seat: str,
    p: ParticipantView,
    record: Callable[[RequestView, str | None], Step],
    stopped_on_request: str,
) -> Wish:
    """What ``p``'s pending requests on ``seat``, run state and hours want: run requests refused while the
    course's access is closed or with no hours left; at 0 hours a running seat stops (a ``seat.stop`` on
    its timeline, so the page and ``seat hours`` say it); ``stopped_on_request`` is the way in's note of a
    seat stopped otherwise. ``record`` makes each request's ``request.record`` step."""
    state = reading.states.get(p.key, RunState(True))
    mine = [r for r in reading.pending if r.participant == p.key and r.seat == seat]
    refusals: dict[str, str] = {}
    if course.closed is not None:
        refusals = dict.fromkeys(RUN_REQUESTS, f"the seat cannot run now: {course.closed}")
    rule = reading.hours.of(p.key) if reading.hours is not None else seat_hours.HoursRule(False, False)
    records = Changes(engine.name, engine.course, engine.host)
    wish = Wish(False)
    wish.runs = plan_holder_requests(
        records, mine, rule.runs(state), {**refusals, **rule.refusals()}, run=lambda r: wish.ran.append(r.action),
        record=record,
    )  # fmt: skip
    wish.steps = records.steps
    hours = state.reason if seat_hours.stopped_for_hours(state.reason) else None
    if wish.runs and rule.stop_reason is not None and not any(r.action in RUN_REQUESTS for r in mine):
        hours = rule.stop_reason
        # tied to no seat (as on every engine): recorded even if the stop fails, which the next pass retries
        wish.steps.append(engine._step("seat.stop", seat, hours, "record", participant=p.key, reason=hours))
        wish.runs = False
    if not wish.runs:
        asked = any(r.action == "stop" for r in mine)
        wish.why = f"{p.key} asked for a stop" if asked else (hours or state.reason or "the seat is stopped")
        wish.stopped = f"stopped: {hours}" if hours is not None and not asked else stopped_on_request
        return wish
    wish.fresh = next((a for a in FRESH if a in wish.ran), None)
    return wish


def do_record(engine: StepEngine[Any], step: Step, verdict: Callable[[Step], tuple[bool, str]]) -> str | None:
    """Carry out ``seat.stop`` (the agent's stop for hours, on the seat's timeline) and ``request.record``:
    failed with its refusal, else done or failed by the engine's ``verdict`` of what its machines show now."""
    d = step.data
    if engine.runner.dry_run:
        return None
    if step.action == "seat.stop":
        engine.store.requests.agent_stop(engine.course, str(step.participant), str(d["reason"]))
        return None
    ok, reason = refused_outcome(d) or verdict(step)
    if not engine.store.requests.finish_request(engine.course, int(d["id"]), ok=ok, reason=reason[:1900]):
        return None
    return None if ok else f"request {d['id']} ({d['request']}) failed: {reason}"
