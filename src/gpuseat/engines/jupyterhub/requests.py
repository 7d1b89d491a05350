"""The JupyterHub engine's part of participant self-service (issue 40): the same request rows the host
and libvirt engines carry out (:mod:`gpuseat.store.requests`), done on the participant's default hub
server through the hub's REST API.

- ``stop``: the server is stopped (``DELETE /users/{name}/server``) and the step waits until the hub
  shows it gone.
- ``start``: the server is started (``POST /users/{name}/server``, through the spawn hooks like a click
  on "Start") and the step waits until it is ready; not possible while the course's access hours are closed.
- ``restart`` and ``reset``: stopped, then started. A hub has no image to reset to, so a reset is a
  restart, and its done message says so.
- ``key``: refused: hub seats are reached through the hub's login, never over SSH.
- Seat hours (:mod:`gpuseat.engines.hours`, the rule of every engine): at 0 hours a running server is
  stopped and the stop is recorded on the seat's timeline with the reason (``seat.stop``), so the hub's
  own *Start* is refused (the spawn hook keeps a stopped seat stopped); a start, restart or reset request
  is refused with the same words until a top-up. Near and in a lab session nothing is stopped for hours.
- Idle stop and never connected (:mod:`gpuseat.engines.idle`, the host engine's rule): the hub's
  ``last_activity`` (the user's and their default server's) is the second signal beside the monitor's GPU
  readings; an idle seat is warned, then its server stopped and the stop recorded (``seat.stop``) after the
  grace; a seat with no hub activity since its holder got it (gpuseat's own probe does not count) is
  stopped after ``never_connected_hours``, counted from the later of getting it and the rule being set.
- Ready before every session (:mod:`gpuseat.engines.sessions`, the rule of every engine): from ``lead_minutes``
  before one, each running hub seat is checked as its holder (``seat.check``: their server started with a
  token of theirs, the GPUs listed in a kernel) and the broken ones posted to the course webhook.

Each request ends in a ``request.record`` step (tied to no seat, so a failed start never leaves it
pending) that looks at the hub and marks the request done or failed with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote

from gpuseat.core.selfservice import RunState
from gpuseat.engines import hours as seat_hours
from gpuseat.engines import idle as idle_rule
from gpuseat.engines import sessions as session_checks
from gpuseat.engines.base import RUN_REQUESTS, Changes, CourseState, Phase, Step, refused_outcome, stale_reason
from gpuseat.errors import EngineError

if TYPE_CHECKING:
    from gpuseat.engines.jupyterhub.engine import JupyterHubEngine
    from gpuseat.store import ParticipantView
    from gpuseat.store.requests import RequestView

#: why a ``key`` request is refused on a hub seat
KEY_REFUSED = "JupyterHub seats log in through the hub, not SSH"
#: the step that carries out each request that changes the server (``key`` changes nothing)
SERVER_STEPS = {"stop": "hub.server.stop", "start": "hub.server.start", "restart": "hub.server.restart"}
#: how far the hub's ``last_activity`` may trail the real activity: the single-user server reports it
#: (and the hub polls its proxy for it) every 5 minutes by default, so a seat is idle only this much later
HUB_ACTIVITY_LAG = timedelta(minutes=5)
#: after a probe's last possible moment, how long the hub may still stamp activity from it (clocks apart)
PROBE_SLACK = timedelta(minutes=2)


def plan_requests(engine: JupyterHubEngine, course: CourseState, changes: Changes, models: dict[str, Any]) -> None:
    """Add the steps of the pending requests on this course's hub seats; ``models`` are the hub's users."""
    if course.course is None or course.archived:
        return
    hub_seats = {s.key for s in course.seats if s.engine == engine.name}
    pending = engine.pending_requests(hub_seats)
    holders = {s.key: p for s, p in course.holders() if s.key in hub_seats} if course.active else {}
    if not pending and not holders:
        return
    ledger = seat_hours.read(engine.store, engine.course, course.now) if holders else None
    add = changes.steps.append
    for r in pending:
        p = holders.get(r.seat or "")
        user = engine.user_of(p) if p is not None else None
        refused = None
        if p is None or p.key != r.participant:
            refused = stale_reason(r, holders)
        elif user is None:
            refused = f"{p.key} has no hub user name ({engine.settings.match_by} is empty)"
        elif r.action == "key":
            refused = KEY_REFUSED
        elif r.action in RUN_REQUESTS and ledger is not None and ledger.of(p.key).refusal is not None:
            refused = ledger.of(p.key).refusal
        elif r.action != "stop" and course.closed is not None:
            refused = f"the seat cannot run now: {course.closed}"
        else:
            action = SERVER_STEPS.get(r.action, "hub.server.restart")  # reset: a restart on a hub
            running = "" in ((models.get(user) or {}).get("servers") or {})
            planned = any(s.action == action and s.target == f"{user}/" for s in changes.steps)
            if not planned and (action != "hub.server.stop" or running):
                phase: Phase = "revoke" if action == "hub.server.stop" else "grant"
                add(engine._step(action, f"{user}/", f"{r.participant} asked for a {r.action}", phase,
                                 participant=r.participant, seats=(r.seat,), user=user, server=""))  # fmt: skip
        add(engine._request_step(r, refused, seat=r.seat, user=user))
    if ledger is not None:
        states = engine.store.requests.run_states(engine.course)
        hub = _HubPass(engine, course, changes, ledger, holders, pending, models, states)
        _plan_hours(hub)
        _plan_checks(hub, stopped=_plan_idle(hub))


class _HubPass(NamedTuple):
    """What a pass's seat-hours, idle and pre-session planning all read: the course, its hub seats' holders,
    their pending requests, the hub's users (``models``) and their run states; and the plan they add to."""

    engine: JupyterHubEngine
    course: CourseState
    changes: Changes
    ledger: seat_hours.CourseHours
    holders: Mapping[str, ParticipantView]
    pending: list[RequestView]
    models: dict[str, Any]
    states: Mapping[str, RunState]


def _plan_hours(hub: _HubPass) -> None:
    """At 0 seat hours a seat stops: a ``stop`` on its timeline (once) and its server, whenever it runs.
    Not while the holder's own request is pending (a start, restart or reset is refused with the reason)."""
    engine, _course, changes, ledger, holders, pending, models, states = hub
    for seat, p in sorted(holders.items()):
        rule = ledger.of(p.key)
        user = engine.user_of(p)
        mine = [r for r in pending if r.participant == p.key and r.seat == seat]
        if rule.stop_reason is None or user is None or any(r.action in (*RUN_REQUESTS, "stop") for r in mine):
            continue
        why = rule.stop_reason
        planned = any(s.action == "hub.server.stop" and s.target == f"{user}/" for s in changes.steps)
        if "" in ((models.get(user) or {}).get("servers") or {}) and not planned:
            changes.steps.append(engine._step("hub.server.stop", f"{user}/", why, "revoke", participant=p.key,
                                              seats=(seat,), user=user, server=""))  # fmt: skip
        if rule.runs(states.get(p.key, RunState(True))):
            # tied to no seat: recorded even if the stop fails (the spawn hook then refuses a new start)
            changes.steps.append(engine._step("seat.stop", seat, why, "record", participant=p.key, reason=why))


def _hub_time(value: object) -> datetime | None:
    """A time in the hub's REST API (ISO 8601, ``Z`` or an offset; naive means UTC), or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def last_activity(model: Mapping[str, Any] | None) -> datetime | None:
    """The hub's last activity of a user: the later of the user's ``last_activity`` (a login, a page, a
    token of theirs used, a start or stop of their server) and their default server's (kernels and
    browser tabs, as the single-user server reports them)."""
    if not model:
        return None
    server = (model.get("servers") or {}).get("") or {}
    found = [t for t in (_hub_time(model.get("last_activity")), _hub_time(server.get("last_activity"))) if t]
    return max(found, default=None)


def _probed(engine: JupyterHubEngine, seat: str, who: str, at: datetime) -> bool:
    """True when ``at`` lies in the last check of ``seat`` as ``who`` (``seats check``, the check before a
    session): the probe starts the holder's server with a token of theirs, which the hub counts as theirs."""
    found = engine.store.delivery.readiness_of(engine.course).get(seat) or {}
    checked = _hub_time(found.get("checked_at")) if found.get("participant") == who else None
    if checked is None:
        return False
    return checked - idle_rule.SAMPLE_SLACK <= at <= checked + timedelta(seconds=engine.timeout) + PROBE_SLACK


def _plan_idle(hub: _HubPass) -> set[str]:
    """Idle stop and never-connected stop (:mod:`gpuseat.engines.idle`, the host engine's rule) with the
    hub's signal, its ``last_activity``: a seat that runs, outside lab sessions, with no request of its
    holder pending. Returns who is stopped by this pass."""
    engine, course, changes, ledger, holders, pending, models, states = hub
    sessions = ledger.sessions
    policies = sessions.policies if sessions is not None else {}
    wanted = {k for k, v in policies.items() if v.get("idle_minutes") or v.get("never_connected_hours")}
    if not wanted or course.closed is not None or (sessions is not None and sessions.current is not None):
        return set()  # (while access is closed every server is stopped on purpose: checked once it opens)
    now = course.now or datetime.now(UTC)  # the agent's clock, as the monitor's readings and the hub's are taken
    ahead = timedelta(0) if course.now is not None else now - ledger.now  # … and the store's times moved onto it
    since_of = {s.key: s.assigned_since for s in course.seats}
    never_rule = any(v.get("never_connected_hours") for v in policies.values())
    connected = engine.store.requests.connected(engine.course) if never_rule else {}
    rule_since = engine.store.requests.policy_set_at(engine.course, "never_connected_hours") if never_rule else {}
    windows: idle_rule.Windows = {}
    stopped: set[str] = set()
    add = changes.steps.append
    for seat, p in sorted(holders.items()):
        user, policy, state = engine.user_of(p), policies.get(p.key, {}), states.get(p.key, RunState(True))
        if user is None or p.key not in wanted or ledger.of(p.key).stop_reason is not None:
            continue
        if not ledger.of(p.key).runs(state) or any(r.participant == p.key and r.seat == seat for r in pending):
            continue
        model = models.get(user) or {}
        server = (model.get("servers") or {}).get("")
        active = last_activity(model)
        step = None
        if policy.get("idle_minutes") and server and server.get("ready"):
            started = max(filter(None, [since_of.get(seat), state.since if state.running else None]), default=None)
            step = idle_rule.idle_step(engine, who=p.key, seat=seat, policy=policy, started=started,
                                       last_active=None if active is None else active + HUB_ACTIVITY_LAG,
                                       signal="no activity on the hub", now=now, ahead=ahead,
                                       windows=windows)  # fmt: skip
        held = since_of.get(seat)
        hours = policy.get("never_connected_hours")
        if step is None and hours and held is not None and not connected.get(p.key):
            if active is not None and active > held + ahead and not _probed(engine, seat, p.key, active):
                step = idle_rule.connected_step(engine, who=p.key, seat=seat, why=f"{p.key} used their hub server",
                                                login=user)  # fmt: skip
            else:
                step = idle_rule.never_connected_step(engine, who=p.key, seat=seat, hours=float(hours), since=held,
                                                      started=state.since if state.running else None,
                                                      now=ledger.now, rule_since=rule_since.get(p.key))  # fmt: skip
        if step is None:
            continue
        if step.action == "seat.stop":
            stopped.add(p.key)
            if server is not None:
                add(engine._step("hub.server.stop", f"{user}/", step.why, "revoke", participant=p.key,
                                 seats=(seat,), user=user, server=""))  # fmt: skip
        add(step)
    return stopped


def _plan_checks(hub: _HubPass, *, stopped: set[str]) -> None:
    """Ready before the session (:mod:`gpuseat.engines.sessions`): each seat that runs (not stopped by its
    holder, nor for hours outside the lead time, nor being stopped now: ``stopped`` for idleness or never
    connected) is checked as its holder; the probe starts their server as them (stopped again after, unless
    it ran), as ``seats check`` does."""
    engine, course, changes, ledger, holders, pending, _models, states = hub
    checks = session_checks.SessionChecks(engine, course, ledger)
    for seat, p in sorted(holders.items()):
        if p.key in stopped:
            continue
        rule = ledger.of(p.key)
        mine = [r.action for r in pending if r.participant == p.key and r.seat == seat and r.action != "key"]
        runs = mine[-1] != "stop" if mine else rule.runs(states.get(p.key, RunState(True)))
        check = checks.check(seat, p.key) if runs and rule.stop_reason is None and engine.user_of(p) else None
        if check is not None:
            changes.steps.append(check)
    if (report := checks.report(holders)) is not None:  # after this pass's checks: the broken seats, to the webhook
        changes.steps.append(report)


def do_request(engine: JupyterHubEngine, step: Step) -> str | None:
    """Carry out ``hub.server.start``, ``hub.server.restart``, ``seat.stop``, ``seat.warn``, ``seat.connected``
    and ``request.record``."""
    d = step.data
    if step.action in idle_rule.IDLE_STEPS:
        return idle_rule.do_idle(engine, step)
    if step.action == "seat.stop":  # the agent's stop (hours, idle, never connected), after the server's
        if not engine.runner.dry_run:
            engine.store.requests.agent_stop(engine.course, str(step.participant), str(d["reason"]))
        return None
    if step.action == "request.record":
        if engine.runner.dry_run:
            return None
        ok, reason = _verdict(engine, d)
        engine.store.requests.finish_request(engine.course, int(d["id"]), ok=ok, reason=reason)
        return None if ok else f"request {d['id']} ({d['request']}) failed: {reason}"
    path = f"/users/{quote(d['user'], safe='')}/server"
    if engine.runner.dry_run:
        return f"would {'DELETE and ' if step.action == 'hub.server.restart' else ''}POST {engine.api}{path}"
    if step.action == "hub.server.restart":
        engine._stop_server(d["user"], "")
    r = engine._call("POST", path)
    if r.status_code not in (201, 202, 400):  # 400: already running
        raise EngineError(f"the hub did not start {d['user']}'s server: {r.status_code} {r.text[:300]}",
                          where=engine.api)  # fmt: skip
    engine._wait(d["user"], ready=True)
    return None


def _verdict(engine: JupyterHubEngine, d: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether the request is done, from what the hub shows now."""
    if (outcome := refused_outcome(d)) is not None:
        return outcome
    action, user = str(d["request"]), str(d["user"])
    server = ((engine._model(user) or {}).get("servers") or {}).get("")
    if action == "stop":
        return (True, "stopped: your server on the hub is stopped") if not server else (False, "the server still runs")
    if not server or not server.get("ready"):
        return False, "your server could not be started (the agent's log says why)"
    url = f"{engine.hub_url}/user/{quote(user, safe='')}/"
    said = {
        "start": "started",
        "restart": "restarted",
        "reset": "reset: on a hub a reset restarts your server (your files stay)",
    }
    return True, f"{said.get(action, action)}: open {url}"
