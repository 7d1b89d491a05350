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
- Ready before every session (:mod:`gpuseat.engines.sessions`, the rule of every engine): from ``lead_minutes``
  before one, each running hub seat is checked as its holder (``seat.check``: their server started with a
  token of theirs, the GPUs listed in a kernel) and the broken ones posted to the course webhook.

Each request ends in a ``request.record`` step (tied to no seat, so a failed start never leaves it
pending) that looks at the hub and marks the request done or failed with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gpuseat.core.selfservice import RunState
from gpuseat.engines import hours as seat_hours
from gpuseat.engines import sessions as session_checks
from gpuseat.engines.base import RUN_REQUESTS, Changes, CourseState, Phase, Step
from gpuseat.errors import EngineError

if TYPE_CHECKING:
    from gpuseat.engines.jupyterhub.engine import JupyterHubEngine
    from gpuseat.store import ParticipantView
    from gpuseat.store.requests import RequestView

#: why a ``key`` request is refused on a hub seat
KEY_REFUSED = "JupyterHub seats log in through the hub, not SSH"
#: the step that carries out each request that changes the server (``key`` changes nothing)
SERVER_STEPS = {"stop": "hub.server.stop", "start": "hub.server.start", "restart": "hub.server.restart"}


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
            refused = f"{r.participant} holds {r.seat} no more"
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
        _plan_hours(engine, changes, ledger, holders, pending, models, states)
        _plan_checks(engine, course, changes, ledger, holders, pending, states)


def _plan_hours(
    engine: JupyterHubEngine,
    changes: Changes,
    ledger: seat_hours.CourseHours,
    holders: Mapping[str, ParticipantView],
    pending: list[RequestView],
    models: dict[str, Any],
    states: Mapping[str, RunState],
) -> None:
    """At 0 seat hours a seat stops: a ``stop`` on its timeline (once) and its server, whenever it runs.
    Not while the holder's own request is pending (a start, restart or reset is refused with the reason)."""
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


def _plan_checks(
    engine: JupyterHubEngine,
    course: CourseState,
    changes: Changes,
    ledger: seat_hours.CourseHours,
    holders: Mapping[str, ParticipantView],
    pending: list[RequestView],
    states: Mapping[str, RunState],
) -> None:
    """Ready before the session (:mod:`gpuseat.engines.sessions`): each seat that runs (not stopped by its
    holder, nor for hours outside the lead time, nor being stopped now) is checked as its holder; the probe
    starts their server as them (stopped again after, unless it ran), as ``seats check`` does."""
    checks = session_checks.SessionChecks(engine, course, ledger)
    for seat, p in sorted(holders.items()):
        rule = ledger.of(p.key)
        mine = [r.action for r in pending if r.participant == p.key and r.seat == seat and r.action != "key"]
        runs = mine[-1] != "stop" if mine else rule.runs(states.get(p.key, RunState(True)))
        check = checks.check(seat, p.key) if runs and rule.stop_reason is None and engine.user_of(p) else None
        if check is not None:
            changes.steps.append(check)
    if (report := checks.report(holders)) is not None:  # after this pass's checks: the broken seats, to the webhook
        changes.steps.append(report)


def do_request(engine: JupyterHubEngine, step: Step) -> str | None:
    """Carry out ``hub.server.start``, ``hub.server.restart``, ``seat.stop`` and ``request.record``."""
    d = step.data
    if step.action == "seat.stop":  # the agent's stop for hours, after the server was stopped
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
    if d.get("refused"):
        return False, str(d["refused"])
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
