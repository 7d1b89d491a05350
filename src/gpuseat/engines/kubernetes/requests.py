"""The Kubernetes engine's part of participant self-service (issue 40): the same request rows the host,
libvirt, hub and cloud engines carry out (:mod:`gpuseat.store.requests`), done in the holder's namespace.
A stopped seat is what a closed access window is, for one participant.

- ``stop``: their RoleBinding is deleted (``access.revoke``: no ``kubectl`` of theirs reaches the namespace)
  and every pod in their namespace ends (``pods.end``); it stays so (no pass binds them or makes the probe
  Pod again, whatever the access window) until a ``start``, ``restart`` or ``reset``. The namespace, its
  quota and its PersistentVolumeClaims are kept.
- ``start``: the RoleBinding is applied again (and the probe Pod made again).
- ``restart``: every pod in the namespace ends (what a Deployment or Job owns is made again by it); the
  access stays; the probe Pod is made again.
- ``reset``: the namespace is deleted (``kubectl delete --wait``: its pods, PersistentVolumeClaims with
  their data, ConfigMaps, Secrets, everything) and made afresh.
- ``key``: failed with :data:`KEY_REFUSED`: the RoleBinding names the participant's cluster user, whom the
  cluster signs in (the organizer's kubeconfig, OIDC …); there is no SSH login to put a key on. The key
  stays stored for an SSH seat.
- A start, restart or reset is refused while the course's access window is closed.
- Seat hours (:mod:`gpuseat.engines.hours`, the rule of every engine): at 0 hours a running seat is stopped
  as above and the stop is recorded on the seat's timeline with the reason (``seat.stop``); a start,
  restart or reset is refused with the same words until a top-up. Near and in a lab session nothing is
  stopped for hours, and a seat stopped for hours runs (it is stopped again after the session).

Each request ends in a ``request.record`` step (tied to no seat, so a failed step never leaves it pending)
that looks at the cluster (the RoleBinding, the namespace, its pods) and at this pass's steps, and marks the
request done or failed with the reason. The seat's stored way in says it is stopped, and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuseat.core.selfservice import RunState
from gpuseat.engines import hours as seat_hours
from gpuseat.engines.base import RUN_REQUESTS, Changes, CourseState, Step, plan_holder_requests, stale_requests

if TYPE_CHECKING:
    from gpuseat.engines.kubernetes.engine import KubernetesEngine
    from gpuseat.store import ParticipantView
    from gpuseat.store.requests import RequestView

#: the participant's RoleBinding in their namespace (what a stop deletes)
BINDING = "gpuseat-participant"
#: why a ``key`` request fails on a Kubernetes seat
KEY_REFUSED = (
    "a Kubernetes seat has no SSH login: you reach your namespace with kubectl, signed in to the cluster as "
    "yourself (your key is kept for an SSH seat)"
)
#: the run requests that act on a running namespace, strongest first (a reset also covers a restart)
FRESH = ("reset", "restart")


@dataclass(frozen=True)
class Reading:
    """The course's pending requests, run states and seat hours, read once per plan."""

    pending: list[RequestView]
    states: dict[str, RunState]
    hours: seat_hours.CourseHours | None


@dataclass
class Wish:
    """What one holder's requests and run state want of their namespace in this pass."""

    #: the seat runs once this pass is done (the RoleBinding and the probe Pod are there)
    runs: bool
    #: why it is stopped (the ``access.revoke`` and ``pods.end`` steps' why)
    why: str = ""
    #: the first note of the seat's way in while it is stopped (None: it runs)
    stopped: str | None = None
    #: "reset" (the namespace made afresh) or "restart" (its pods end)
    fresh: str | None = None
    #: the ``request.record`` (and ``seat.stop``) steps, planned after the seat's own steps
    steps: list[Step] = field(default_factory=list)


def read_requests(engine: KubernetesEngine, course: CourseState, seats: set[str], held: bool) -> Reading | None:
    """The pending requests on these seats, every holder's run state and (``held``: a seat is held) their
    hours (None: an archived or deleted course, whose requests nobody carries out)."""
    if not seats or course.course is None or course.archived:
        return None
    ledger = seat_hours.read(engine.store, engine.course, course.now) if held else None
    return Reading(engine.pending_requests(seats), engine.store.requests.run_states(engine.course), ledger)


def stale_steps(engine: KubernetesEngine, reading: Reading, holders: dict[str, ParticipantView]) -> list[Step]:
    """A ``request.record`` that fails each pending request whose asker holds its seat no more."""
    return [engine._request_step(r, why, seat=r.seat) for r, why in stale_requests(reading.pending, holders)]


def plan_holder(
    engine: KubernetesEngine, course: CourseState, reading: Reading, seat: str, p: ParticipantView, ns: str, made: bool
) -> Wish:
    """What ``p``'s pending requests on ``seat`` and their run state want of their namespace ``ns``
    (``made``: it exists now)."""
    state = reading.states.get(p.key, RunState(True))
    mine = [r for r in reading.pending if r.participant == p.key and r.seat == seat]
    refusals: dict[str, str] = {}
    if course.closed is not None:
        refusals = dict.fromkeys(RUN_REQUESTS, f"the seat cannot run now: {course.closed}")
    rule = reading.hours.of(p.key) if reading.hours is not None else seat_hours.HoursRule(False, False)
    ran: list[str] = []
    records = Changes(engine.name, engine.course, engine.host)

    def record(r: RequestView, refused: str | None) -> Step:
        refused = refused or (KEY_REFUSED if r.action == "key" else None)
        return engine._request_step(r, refused, target=ns, seat=seat, namespace=ns, made=made)

    runs = plan_holder_requests(
        records, mine, rule.runs(state), {**refusals, **rule.refusals()}, run=lambda r: ran.append(r.action),
        record=record,
    )  # fmt: skip
    wish = Wish(runs, steps=records.steps)
    hours = state.reason if seat_hours.stopped_for_hours(state.reason) else None
    if runs and rule.stop_reason is not None and not any(r.action in RUN_REQUESTS for r in mine):
        hours = rule.stop_reason  # recorded on the seat's timeline: the page and `seat hours` say it
        # tied to no seat (as the other engines'): recorded even if the revoke fails, which the next pass retries
        wish.steps.append(engine._step("seat.stop", seat, hours, "record", participant=p.key, reason=hours))
        wish.runs = runs = False
    if not runs:
        asked = any(r.action == "stop" for r in mine)
        wish.why = f"{p.key} asked for a stop" if asked else (hours or state.reason or "the seat is stopped")
        if hours is not None and not asked:
            wish.stopped = f"stopped: {hours}"
        else:
            wish.stopped = f"stopped: on {p.key}'s request; no access to namespace {ns} until a start"
        return wish
    wish.fresh = next((a for a in FRESH if a in ran), None) if made else None
    return wish


def do_request(engine: KubernetesEngine, step: Step) -> str | None:
    """Carry out ``seat.stop`` (the agent's stop for hours) and ``request.record``: done or failed, from
    the cluster and this pass's steps."""
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


def _verdict(engine: KubernetesEngine, step: Step) -> tuple[bool, str]:
    """Whether the request is done, from what the cluster shows now."""
    d = step.data
    if d.get("refused"):
        return False, str(d["refused"])
    action = str(d["request"])
    ns = str(d.get("namespace") or step.target)
    have = engine.applied()
    bound = ("RoleBinding", ns, BINDING) in have
    if action == "stop":
        if bound:
            return False, f"your access to namespace {ns} could not be revoked (the agent's log says why): ask again"
        left = engine._running_pods(ns) if ("Namespace", "", ns) in have else []
        if left:
            return False, f"your pods could not all be ended ({', '.join(left[:5])} still running): ask again"
        return True, f"stopped: your access to namespace {ns} is revoked and your pods ended, until a start"
    if ("Namespace", "", ns) not in have:
        return False, f"your namespace {ns} could not be made (the agent's log says why): ask again"
    step_of = {"reset": "namespace.delete", "restart": "pods.end"}.get(action)
    if step_of is not None and d.get("made") and (step_of, ns) not in engine.carried:
        return False, f"the {action} was not carried out (the agent's log says why): ask again"
    if not bound:
        return False, f"your access to namespace {ns} could not be granted (the agent's log says why): ask again"
    said = {
        "start": f"started: you can use namespace {ns} again",
        "restart": f"restarted: your pods in namespace {ns} ended (a Deployment or Job makes its own again); "
        "your access stays",
        "reset": f"reset: namespace {ns} was deleted and made afresh; everything in it is gone, "
        "PersistentVolumeClaims and their data too",
    }
    if action in FRESH and not d.get("made"):  # nothing was there to end or delete
        return True, f"{said[action].split(':', 1)[0]}: namespace {ns} is made afresh; you can use it"
    return True, said.get(action, f"started: you can use namespace {ns} again")
