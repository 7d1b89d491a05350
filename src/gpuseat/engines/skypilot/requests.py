"""The SkyPilot engine's part of participant self-service (issue 40): the same request rows the host,
libvirt and hub engines carry out (:mod:`gpuseat.store.requests`), done on the seat's cluster, so a
participant who is done for the day stops their cloud machine and what it costs by the hour.

- ``stop``: the cluster is stopped (``sky.stop``: the disk is kept, and still billed) and stays stopped
  (no pass launches a stopped seat's cluster, whatever the access window) until a ``start``, ``restart``
  or ``reset``.
- ``start``: the cluster is launched again (``sky.launch`` starts a stopped cluster with its disk).
- ``restart``: stopped, then launched again: a reboot, the disk is kept.
- ``reset``: torn down (``sky.down``: machine and disk gone), then launched afresh: a new machine, a new
  address, nothing of the old one left.
- ``key``: the new key is already in the store; an up cluster is launched again, which re-runs its setup
  (the task's setup makes the new key the only one in ``authorized_keys``; the machine is not rebooted).
  A stopped cluster gets it from the setup of its next launch, and the done message says so.
- A start, restart or reset is refused while the course's access window is closed.
- Seat hours (:mod:`gpuseat.engines.hours`, the rule of every engine): at 0 hours a running cluster is
  stopped and the stop is recorded on the seat's timeline with the reason (``seat.stop``); a start,
  restart or reset is refused with the same words until a top-up. Near and in a lab session nothing is
  stopped for hours, and a cluster stopped for hours runs (it is stopped again after the session).

Each request ends in a ``request.record`` step (tied to no seat, so a failed launch never leaves it
pending) that looks at the cluster (``sky.status``) and at this pass's launch, and marks the request
done or failed with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from gpuseat.core.selfservice import RunState
from gpuseat.engines import hours as seat_hours
from gpuseat.engines.base import RUN_REQUESTS, Changes, CourseState, Step, plan_holder_requests, stale_requests

if TYPE_CHECKING:
    from gpuseat.engines.skypilot.engine import SkyPilotEngine
    from gpuseat.engines.skypilot.sdk import Cluster
    from gpuseat.store import ParticipantView, SeatView
    from gpuseat.store.requests import RequestView

#: the run requests that launch even an up cluster, strongest first (a reset also covers a restart)
FRESH = ("reset", "restart")


@dataclass(frozen=True)
class Reading:
    """The course's pending requests, run states and seat hours, read once per plan."""

    pending: list[RequestView]
    states: dict[str, RunState]
    hours: seat_hours.CourseHours | None


@dataclass
class Wish:
    """What one holder's requests and run state want of their cluster in this pass."""

    #: the cluster runs once this pass is done
    runs: bool
    #: why it is stopped (the ``cloud.stop`` step's why)
    why: str = ""
    #: the seat's state reason while it is stopped on request (None: it runs)
    stopped: str | None = None
    #: "reset" (down, then launch), "restart" (stop, then launch) or "key" (launch an up cluster again)
    fresh: str | None = None
    #: the ``request.record`` steps, planned after the seat's own steps
    steps: list[Step] = field(default_factory=list)


def read_requests(engine: SkyPilotEngine, course: CourseState, seats: set[str], held: bool) -> Reading | None:
    """The pending requests on these seats, every holder's run state and (``held``: a seat is held) their
    hours (None: an archived or deleted course, whose requests nobody carries out)."""
    if not seats or course.course is None or course.archived:
        return None
    ledger = seat_hours.read(engine.store, engine.course, course.now) if held else None
    return Reading(engine.pending_requests(seats), engine.store.requests.run_states(engine.course), ledger)


def stale_steps(engine: SkyPilotEngine, reading: Reading, holders: dict[str, ParticipantView]) -> list[Step]:
    """A ``request.record`` that fails each pending request whose asker holds its seat no more."""
    return [engine._request_step(r, why, seat=r.seat) for r, why in stale_requests(reading.pending, holders)]


def plan_holder(
    engine: SkyPilotEngine,
    course: CourseState,
    reading: Reading,
    seat: SeatView,
    p: ParticipantView,
    info: Cluster | None,
) -> Wish:
    """What ``p``'s pending requests on ``seat`` and their run state want of the seat's cluster."""
    cluster = engine.cluster_of(seat)
    state = reading.states.get(p.key, RunState(True))
    mine = [r for r in reading.pending if r.participant == p.key and r.seat == seat.key]
    refusals: dict[str, str] = {}
    if course.closed is not None:
        refusals = dict.fromkeys(RUN_REQUESTS, f"the seat cannot run now: {course.closed}")
    rule = reading.hours.of(p.key) if reading.hours is not None else seat_hours.HoursRule(False, False)
    ran: list[str] = []
    records = Changes(engine.name, engine.course, engine.host)
    runs = plan_holder_requests(
        records,
        mine,
        rule.runs(state),
        {**refusals, **rule.refusals()},
        run=lambda r: ran.append(r.action),
        record=partial(engine._request_step, target=cluster, seat=seat.key, cluster=cluster),
    )
    wish = Wish(runs, steps=records.steps)
    hours = state.reason if seat_hours.stopped_for_hours(state.reason) else None
    if runs and rule.stop_reason is not None and not any(r.action in RUN_REQUESTS for r in mine):
        hours = rule.stop_reason  # recorded on the seat's timeline: the page and `seat hours` say it
        # tied to no seat (as the other engines'): recorded even if the stop fails, which the next pass retries
        wish.steps.append(engine._step("seat.stop", seat.key, hours, "record", participant=p.key, reason=hours))
        wish.runs = runs = False
    if not runs:
        asked = any(r.action == "stop" for r in mine)
        wish.why = f"{p.key} asked for a stop" if asked else (hours or state.reason or "the seat is stopped")
        if hours is not None and not asked:
            wish.stopped = f"stopped: {hours}"
        elif info is not None:
            wish.stopped = f"stopped: on {p.key}'s request; {cluster} keeps its disk until a start"
        else:
            wish.stopped = f"not launched: stopped on {p.key}'s request until a start"
        return wish
    wish.fresh = next((a for a in FRESH if a in ran), None)
    if wish.fresh is None and info is not None and info.up and any(r.action == "key" for r in mine):
        wish.fresh = "key"  # the launch re-runs the setup, which installs the new key
    return wish


def do_request(engine: SkyPilotEngine, step: Step) -> str | None:
    """Carry out ``seat.stop`` (the agent's stop for hours) and ``request.record``: done or failed, from
    the cluster and this pass's launch."""
    d = step.data
    if engine.runner.dry_run:
        return None
    if step.action == "seat.stop":
        engine.store.requests.agent_stop(engine.course, str(step.participant), str(d["reason"]))
        return None
    ok, reason = _verdict(engine, step)
    if not engine.store.requests.finish_request(engine.course, int(d["id"]), ok=ok, reason=reason[:1900]):
        return None
    return None if ok else f"request {d['id']} ({d['request']}) failed: {reason}"


def _verdict(engine: SkyPilotEngine, step: Step) -> tuple[bool, str]:
    """Whether the request is done, from what SkyPilot shows now."""
    d = step.data
    if d.get("refused"):
        return False, str(d["refused"])
    action, cluster = str(d["request"]), str(d["cluster"])
    launched, error = engine.launch_result(cluster)
    if error is not None:
        return False, f"{cluster} could not be launched: {error.what}"
    info = engine.sky.status([cluster]).get(cluster)
    status = info.status if info is not None else None
    if action == "stop":
        if status is None:
            return True, "stopped: your cloud machine is not launched, and it stays so until a start"
        if status == "STOPPED":
            return (
                True,
                f"stopped: your cloud machine {cluster} is stopped; its disk is kept (and billed) until a start",
            )
        return False, f"{cluster} could not be stopped (SkyPilot says {status})"
    if action == "key":
        if status != "UP":
            return True, "stored: your new key is installed when your cloud machine starts again"
        if launched:
            return True, f"your new key is installed on {cluster} (the old one is removed)"
        return False, "the key could not be installed (the agent's log says why): ask again"
    if action in FRESH and not launched:
        return False, f"the {action} was not carried out (the agent's log says why): ask again"
    if status != "UP":
        return False, f"{cluster} could not be started (SkyPilot says {status or 'it is not there'})"
    said = {
        "start": "started: you can log in",
        "restart": f"restarted: {cluster} was stopped and started again with its disk; you can log in",
        "reset": "reset: a fresh cloud machine (everything on the old one is gone); you can log in",
    }
    return True, said.get(action, "started: you can log in")
