"""Idle stop and never-connected stop (``[policy] idle_minutes``, ``never_connected_hours``): the one rule
the engines that carry them out apply (host and JupyterHub seats), so a seat is warned, stopped and told
why in the same words on each; every engine brings only its own activity signal.

- Idle: every monitor reading of the seat's GPU over ``idle_minutes`` below ``idle_gpu_percent`` *and* no
  activity of the engine's own kind (host: SSH; JupyterHub: the hub's ``last_activity``) → a warning on
  the page (``seat.warn``); still so ``grace_minutes`` after it → a ``seat.stop`` with the reason. No
  readings, readings that do not reach back over the window, or a start within it: never idle. The
  engine calls it only outside lab sessions, for a seat that runs.
- Never connected: a seat whose holder has not used it within ``never_connected_hours`` of getting it (or of
  their last start carried out, or of the rule being set for them after they got it: each gives the whole
  window again) is stopped with :func:`never_connected_reason`; the first use seen is recorded once
  (``seat.connected``).

:func:`unenforced` names the seats of an engine that does not carry out one of these stops or seat hours
(its :class:`~gpuseat.engines.registry.EngineSpec`'s ``policy_stops`` leaves it out), so ``gpuseat apply``
and the agent say so instead of doing nothing in silence.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpuseat.core.amounts import hours_text
from gpuseat.core.seating import AGENT_ACTOR
from gpuseat.engines import course_webhook, registry
from gpuseat.errors import NotFound

if TYPE_CHECKING:
    from gpuseat.engines.base import CourseState, Step, StepEngine
    from gpuseat.store import CourseStore

#: the monitor's readings must reach back to within this of an idle window's start
SAMPLE_SLACK = timedelta(minutes=2)
#: each pass's monitor readings per window start (one read per window, every seat of the course)
Windows = dict[datetime, dict[str, tuple[int, int | None, datetime]]]
#: the steps :func:`do_idle` carries out
IDLE_STEPS = ("seat.warn", "seat.connected")
_WHAT = {
    "idle_minutes": "idle stop ([policy] idle_minutes) is not carried out",
    "never_connected_hours": "the never-connected stop ([policy] never_connected_hours) is not carried out",
    "quota_hours": "seat hours ([policy] quota_hours) are counted but not enforced",
}
_STILL = {
    "idle_minutes": "only {engines} seats are stopped when idle",
    "never_connected_hours": "only {engines} seats are stopped for it",
    "quota_hours": "`gpuseat seat hours` shows them, nothing stops at 0 h",
}
_SHOWN = {"jupyterhub": "JupyterHub"}  # an engine's name as the notes write it


def carried_by(field: str) -> tuple[str, ...]:
    """The engines that carry out ``[policy]`` ``field`` (their spec's ``policy_stops``), in registry order."""
    return tuple(n for n, s in registry.specs().items() if field in s.policy_stops)


def idle_step(
    engine: StepEngine[Any],
    *,
    who: str,
    seat: str,
    policy: Mapping[str, Any],
    started: datetime | None,
    last_active: datetime | None,
    signal: str,
    now: datetime,
    ahead: timedelta,
    windows: Windows,
) -> Step | None:
    """The idle rule for one running seat: a warning (``seat.warn``), a stop (``seat.stop``) or nothing.

    Counted on ``now``'s clock, that of the monitor's readings, as ``last_active`` (the engine's own last
    activity; ``signal`` says which, e.g. "no SSH activity") is. ``started`` (when the seat last started)
    and the last warning are the store's times, moved by ``ahead`` (how far ``now``'s clock is ahead of
    the store's): a host 5 h ahead warned on every pass and never stopped; one 5 h behind counted every
    seat as just started, and none was ever idle."""
    if started is not None:
        started += ahead
    minutes, grace = int(policy["idle_minutes"]), int(policy.get("grace_minutes") or 0)
    percent = float(policy.get("idle_gpu_percent") or 0)

    def idle_for(span: timedelta) -> bool:
        since = now - span
        if (started is not None and started > since) or (last_active is not None and last_active > since):
            return False
        if since not in windows:
            windows[since] = engine.store.requests.gpu_window(engine.course, since)
        got = windows[since].get(seat)
        return got is not None and got[1] is not None and got[1] < percent and got[2] <= since + SAMPLE_SLACK

    if not idle_for(timedelta(minutes=minutes)):
        return None
    said = f"GPU below {percent:g} % and {signal} for {minutes} min"
    last = engine.store.requests.idle_warning(engine.course, who)
    warned = None if last is None else last[0] + ahead
    if warned is None or warned < now - timedelta(minutes=minutes + grace) - SAMPLE_SLACK:
        text = f"your seat is idle ({said}): it stops in {grace} min unless you use it"
        return engine._step("seat.warn", seat, text, "record", participant=who, text=text, minutes=minutes,
                            grace=grace)  # fmt: skip
    if now - warned >= timedelta(minutes=grace) and idle_for(timedelta(minutes=minutes + grace)):
        why = f"idle: {said}, warned {grace} min before"
        return engine._step("seat.stop", seat, why, "record", participant=who, reason=why)
    return None


def never_connected_reason(who: str, hours: float, *, counted_from: str = "getting the seat") -> str:
    """The reason on a never-connected stop (the participant page and ``seat requests`` show it), the hours
    as the portal writes them (``%g`` printed a tiny stored value as ``1e-07 h``); ``counted_from``: what
    the window was counted from (getting the seat, their last start, the rule being set)."""
    return f"never connected: {who} did not log in within {hours_text(hours)} h of {counted_from}"


def never_connected_step(
    engine: StepEngine[Any],
    *,
    who: str,
    seat: str,
    hours: float,
    since: datetime,
    started: datetime | None,
    now: datetime,
    rule_since: datetime | None = None,
) -> Step | None:
    """A stop for a seat ``who`` got at ``since`` and has not used by ``now`` (same clock), once ``hours``
    have passed; None before. ``started`` (their last start, restart or reset carried out, while the seat
    runs) gives a fresh window: a start after a never-connected stop counted from ``since`` again, and the
    next pass stopped the seat before its holder could log in. So does ``rule_since``, when the rule was set
    for them (:meth:`~gpuseat.store.requests.Requests.policy_set_at`): set on day 3, it counted from day 1 and
    stopped every holder at the next pass, those whose day-1 login was no longer in the log read too. The
    caller has looked for a use first (:func:`connected_step`)."""
    window = max(since, started or since, rule_since or since)
    if now - window < timedelta(hours=hours):
        return None
    counted_from = "getting the seat"
    if window > since:
        counted_from = "their last start" if window == started else "the rule being set"
    why = never_connected_reason(who, hours, counted_from=counted_from)
    return engine._step("seat.stop", seat, why, "record", participant=who, reason=why)


def connected_step(engine: StepEngine[Any], *, who: str, seat: str, why: str, login: str) -> Step:
    """Record once (a ``seat.connected`` event) that ``who`` used their seat: never stopped for it after."""
    return engine._step("seat.connected", seat, why, "record", participant=who, login=login)


def do_idle(engine: StepEngine[Any], step: Step) -> str | None:
    """Carry out ``seat.warn`` (the page's warning, and the course webhook's ``seat.idle``) and
    ``seat.connected``; nothing in a dry run."""
    if engine.runner.dry_run:
        return None
    d = step.data
    if step.action == "seat.connected":
        engine.store.events.log(engine.course, "seat.connected", participant=step.participant, seat=step.target,
                                detail={"login": d["login"]}, actor=AGENT_ACTOR, gone_ok=True)  # fmt: skip
        return None
    engine.store.requests.warn_idle(engine.course, str(step.participant), step.target, str(d["text"]))
    url = course_webhook.webhook_of(engine.store, engine.course)
    if url is not None:
        stops = datetime.now(UTC) + timedelta(minutes=int(d["grace"]))
        course_webhook.post(url, {"event": "seat.idle", "course": engine.course, "seat": step.target,
                                  "participant": step.participant, "minutes_idle": int(d["minutes"]),
                                  "stops_at": stops.isoformat(timespec="seconds"), "text": d["text"]})  # fmt: skip
    return None


def unenforced(store: CourseStore, state: CourseState, engine: str, host: str | None) -> list[str]:
    """One line per ``[policy]`` field that ``engine`` does not carry out although the policy of some of
    its seats here (on ``host``, when given) sets it: which seats, why not, what still happens. A held
    seat has its holder's policy (their group's), a free one the course's."""
    spec = registry.specs().get(engine)
    missing = [f for f in registry.POLICY_STOPS if spec is None or f not in spec.policy_stops]
    if not missing or not state.active:
        return []
    seats = [s for s in state.seats if s.engine == engine and (host is None or (s.host or None) == host)]
    if not seats:
        return []
    policies = store.requests.seat_policies(state.key).policies
    try:
        course_policy: Mapping[str, Any] = store.courses.course_file(state.key).policy_for(None)
    except NotFound:  # a course made without a file has no policy
        course_policy = {}
    out = []
    for field in missing:
        named = [s.key for s in seats if (policies.get(s.participant or "") or course_policy).get(field)]
        if not named:
            continue
        shown = ", ".join(named[:8]) + (f" and {len(named) - 8} more" if len(named) > 8 else "")
        if engine == "libvirt" and field == "idle_minutes":
            why = "the libvirt engine has no such stop yet (a GPU passed through to a VM has no monitor readings)"
        else:
            why = f"the {engine} engine has no such stop yet"
        still = _STILL[field].format(engines=_listed([_SHOWN.get(n, n) for n in carried_by(field)]))
        out.append(f"{_WHAT[field]} on {engine} seats ({shown}): {why}; {still} (docs/policy.md)")
    return out


def _listed(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)
