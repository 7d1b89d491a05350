"""Plan and apply: from the store to every engine's machines, for one course or all of them.

One pass builds each course's :class:`~gpuseat.engines.base.CourseState`, asks each engine that
delivers its seats (or that still holds access for it) for a plan, applies it, observes what access
remains and records that (``engine_holdings``), with one ``engine.apply`` events row per engine and
course that changed something. ``gpuseat apply`` runs one pass; ``gpuseat agent`` runs a pass
whenever the store changes, a schedule boundary passes, or a resync is due.

A course whose deletion was asked for is deleted here, once no engine holds anything for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Required, TypedDict, Unpack

from gpuseat.core.seating import AGENT_ACTOR
from gpuseat.engines import idle, registry
from gpuseat.engines.base import ApplyReport, Changes, CourseState, Engine
from gpuseat.engines.runner import Runner
from gpuseat.errors import GpuseatError, NotFound, StoreBusy

if TYPE_CHECKING:
    from gpuseat.store import CourseStore


@dataclass
class Planned:
    """One engine's plan for one course, with the engine that made it (or why it could not plan)."""

    course: str
    engine_name: str
    host: str | None
    engine: Engine | None
    state: CourseState | None
    changes: Changes | None
    error: str | None = None
    drift: bool = False
    error_code: int = 2  # why it could not plan: 2 the store's data or a setting, 1 the machine or a service

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out: dict[str, Any] = (
            self.changes.to_dict() if self.changes else {"engine": self.engine_name, "course": self.course}
        )
        out["error"] = self.error
        out["drift"] = self.drift
        return out


@dataclass
class Pass:
    """What one pass planned and applied."""

    planned: list[Planned] = field(default_factory=list)
    reports: list[ApplyReport] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    next_change: datetime | None = None

    @property
    def failed(self) -> list[dict[str, Any]]:
        """Failed steps and engines that could not plan, one dict each."""
        out: list[dict[str, Any]] = [
            {"course": p.course, "engine": p.engine_name, "error": p.error, "exit_code": p.error_code}
            for p in self.planned
            if p.error
        ]
        for r in self.reports:
            out += [
                {
                    "course": r.course,
                    "engine": r.engine,
                    "step": o.step.key,
                    "error": o.message,
                    "exit_code": o.exit_code,
                }
                for o in r.failed
            ]
        return out

    @property
    def pending(self) -> int:
        """Steps planned and not (yet) done."""
        done = sum(len(r.done) for r in self.reports)
        return sum(len(p.changes.steps) for p in self.planned if p.changes) - done


def course_state(store: CourseStore, key: str, *, now: datetime | None = None) -> CourseState:
    """The store's wanted state of course ``key`` (a course gone from the store: nobody holds anything).
    Its ``now`` is the time given, else None: an engine then reads the clock it needs (seat hours: the
    store's, :meth:`gpuseat.store.requests.Requests.now`). The access window is worked out on the time
    given, else on the store's clock too, so that a machine whose clock is off neither shuts a course in
    its hours nor opens it outside them, and agrees with the hours and sessions it counts."""
    try:
        view = store.courses.get_course(key)
    except NotFound:
        return CourseState(key, None, (), {}, {}, now=now)
    deleting = key in store.agents.pending_deletions()
    seats = tuple(store.seats.seats(key))
    people = {p.key: p for p in store.roster.participants(key)}
    access = store.delivery.access_of(key)
    archived = bool(getattr(view, "archived_at", None)) or deleting or _archived(store, key)
    at = now or store.requests.now()
    closed, next_change, wake_at = _window(store, key, view.timezone, at)
    return CourseState(key, view, seats, people, access, archived, closed, next_change, now, wake_at, at)


def _archived(store: CourseStore, key: str) -> bool:
    from gpuseat.store.undo import is_archived

    return is_archived(store, key)


def _window(
    store: CourseStore, key: str, timezone: str, now: datetime
) -> tuple[str | None, datetime | None, datetime | None]:
    """(why access is closed now, or None; when the access window next opens or closes; when a pass next plans
    differently) from the course's schedule (:func:`gpuseat.core.window.access_now`); a course without a file
    is always open."""
    from gpuseat.core.window import access_now

    try:
        course_file = store.courses.course_file(key)
    except GpuseatError:
        return None, None, None
    return access_now(course_file, timezone, now)


def targets(
    store: CourseStore,
    *,
    course: str | None,
    engine: str | None,
    courses: Iterable[str] | None = None,
    host: str | None = None,
) -> list[tuple[str, str]]:
    """(course key, engine) pairs to plan: every delivering engine of each course's seats, and every
    engine that still holds access for a course (archived, deleted or not). ``courses``: only these
    (the agent re-plans the courses whose events it has not seen). ``host``: the machine this runs for;
    unless one course is asked for by name, a per-host engine's course with no seat and no holding there
    is not its to plan (a second server's course is that server's agent's). The seats of an installed plug-in
    that cannot be used (:func:`~gpuseat.engines.registry.unusable`) are planned too: its plan says why it cannot,
    where leaving it out said nothing of seats it never delivered."""
    delivering = set(registry.delivering())
    planned = delivering | set(registry.unusable())
    pairs: set[tuple[str, str]] = set()

    def here(name: str, where: str | None) -> bool:
        if course is not None or host is None or not where or where == host:
            return True
        return name not in delivering or not registry.spec(name).per_host

    if courses is not None:
        keys = list(courses)
        for h in store.agents.holdings():
            if h["course"] in keys and here(h["engine"], h["host"]):
                pairs.add((h["course"], h["engine"]))
    elif course is not None:
        try:
            keys = [store.courses.get_course(course).key]
        except NotFound:
            keys = [course] if store.agents.holdings(course) else []
            if not keys:
                raise
    else:
        keys = [c.key for c in store.courses.list_courses()] + list(store.agents.pending_deletions())
    for key in dict.fromkeys(keys):
        try:
            seats = store.seats.seats(key)
        except NotFound:
            seats = []
        pairs |= {(key, s.engine) for s in seats if s.engine in planned and here(s.engine, s.host)}
    if courses is None:
        for h in store.agents.holdings(course):
            if (course is None or h["course"] == course) and here(h["engine"], h["host"]):
                pairs.add((h["course"], h["engine"]))
    return sorted((c, e) for c, e in pairs if engine is None or e == engine)


def per_host(engine: str) -> bool:
    """Whether ``engine``'s seats are delivered by the agent of their ``host`` (an engine no longer installed: no)."""
    spec = registry.specs().get(engine)
    return spec is not None and spec.per_host


def _seat_host(state: CourseState | None, engine: str) -> str | None:
    """The one host of the course's seats of a per-host ``engine`` (None: not per host, or none or several):
    where an engine that could not plan without ``--host`` would have acted, so ``gpuseat apply`` leaves its
    failure to the agent of that host as it leaves its plan."""
    hosts = {s.host for s in state.seats if s.engine == engine and s.host} if state is not None else set()
    return hosts.pop() if len(hosts) == 1 and per_host(engine) else None


def settings_for(store: CourseStore, course: str, engine: str, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The engine's stored settings for the course, with ``overrides`` (flags) over them."""
    try:
        stored = store.agents.engine_settings(course, engine)
    except NotFound:
        stored = {}
    return {**stored, **{k: v for k, v in (overrides or {}).items() if v not in (None, "")}}


def plan_all(
    store: CourseStore,
    *,
    course: str | None = None,
    engine: str | None = None,
    host: str | None = None,
    runner: Runner,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    now: datetime | None = None,
    revoke_all: bool = False,
    courses: Iterable[str] | None = None,
    seat_host: str | None = None,
) -> list[Planned]:
    """Every engine's plan for every course (or one course / engine); ``revoke_all``: as if nobody held
    a seat (``host down`` at the end of a course on one server); ``seat_host``: no ``host``, the host a per-host
    engine acts for (an agent started without ``--host``: the one its seats are on), the others acting for none."""
    out: list[Planned] = []
    states: dict[str, CourseState] = {}
    for key, name in targets(store, course=course, engine=engine, courses=courses, host=host or seat_host):
        if key not in states:
            states[key] = course_state(store, key, now=now)
            if revoke_all:
                states[key] = replace(states[key], archived=True)
        state = states[key]
        at = host if host is not None or not per_host(name) else seat_host
        try:
            values = settings_for(store, key, name, (overrides or {}).get(name))
            eng = registry.build(name, store, key, settings=values, runner=runner, host=at)
            changes = eng.plan(state)
            # a [policy] stop this engine does not carry out is said, never silently skipped
            changes.notes += idle.unenforced(store, state, name, getattr(eng, "host", at))
            out.append(Planned(key, name, getattr(eng, "host", at), eng, state, changes))
        except GpuseatError as exc:
            why = (f"{exc.where}: " if exc.where else "") + exc.what + (f" (to fix: {exc.fix})" if exc.fix else "")
            out.append(Planned(key, name, at or _seat_host(state, name), None, state, None, why,
                               error_code=exc.exit_code))  # fmt: skip
        except ImportError as exc:
            why = f"engine {name} cannot load: {exc}"
            out.append(Planned(key, name, at or _seat_host(state, name), None, state, None, why, error_code=1))
    return out


def apply_all(
    store: CourseStore,
    planned: Iterable[Planned],
    *,
    guard: Callable[[], bool] | None = None,
    drift: bool = False,
    actor: str = AGENT_ACTOR,
    writes: bool = False,
) -> Pass:
    """Apply each plan, record what access remains, write one events row per engine and course that
    changed anything (``drift``: the changes undo what someone did by hand), finish asked deletions.
    ``writes``: the plans change machines (not a dry run), so the store must take the pass's records: that is
    checked before the first step (a held write lock fails the pass before any machine is touched)."""
    result = Pass(planned=list(planned))
    checked = not writes
    for p in result.planned:
        if p.state is not None and p.state.wake_at is not None:
            result.next_change = min(filter(None, [result.next_change, p.state.wake_at]))
        if p.engine is None or p.changes is None:
            continue
        p.drift = drift and not p.changes.empty
        if not checked and not p.changes.empty:
            store.database.check_writable()  # StoreBusy now, while nothing is changed anywhere
            checked = True
        try:
            report = (
                p.engine.apply(p.changes, guard=guard)
                if not p.changes.empty
                else ApplyReport(p.engine_name, p.course, p.host)
            )
            result.reports.append(report)
            if report.dry_run:
                continue
            if report.outcomes:
                _log_report(store, p, report, drift=drift, actor=actor)
        except StoreBusy as exc:  # a lock taken after the check: the steps before it were carried out
            raise StoreBusy(exc.what, where=exc.where, fix=_partly(exc.fix)) from exc
        try:
            found = p.engine.observe(p.state) if p.state is not None else []
            store.agents.set_holdings(p.course, p.engine_name, p.host, [h.to_dict() for h in found])
        except GpuseatError as exc:
            report.notes.append(f"could not observe what remains: {exc.what}")
    if not any(r.dry_run for r in result.reports):
        result.deleted = finish_deletions(store, actor=actor)
    return result


def _partly(fix: str | None) -> str:
    """A store-busy fix for a pass that stopped after some steps: the machines, not the store, may have changed."""
    head = (fix or "run this again").removesuffix("; nothing was changed")
    return (
        f"{head}; the store is unchanged, but steps before it may have changed the machines: the next apply "
        "(or the agent) finishes the pass, and steps already done are not repeated"
    )


def _log_report(store: CourseStore, p: Planned, report: ApplyReport, *, drift: bool, actor: str) -> None:
    detail = {
        "engine": p.engine_name,
        "host": p.host,
        "done": [f"{o.step.sign} {o.step.action} {o.step.target}" for o in report.done][:200],
        "failed": [{"step": f"{o.step.action} {o.step.target}", "error": o.message} for o in report.failed][:200],
        "skipped": sum(1 for o in report.outcomes if o.state == "skipped"),
    }
    action = "drift.reverted" if drift else "engine.apply"
    store.events.log(p.course, action, detail=detail, actor=actor, gone_ok=True)


def finish_deletions(store: CourseStore, *, actor: str = AGENT_ACTOR) -> list[str]:
    """Delete each course whose deletion was asked for and for which no engine holds anything now."""
    from gpuseat.store.undo import drop_course

    done = []
    for key, asked in store.agents.pending_deletions().items():
        if store.agents.holdings(key):
            continue
        with contextlib.suppress(NotFound):
            drop_course(store, key, export=asked["export"], sha256=asked["sha256"], actor=asked["actor"] or actor)
        store.agents.forget_deletion(key)
        done.append(key)
    return done


class PlanOptions(TypedDict, total=False):
    """What :func:`one_pass` hands on to :func:`plan_all` (which says what each one means)."""

    course: str | None
    engine: str | None
    host: str | None
    runner: Required[Runner]
    overrides: Mapping[str, Mapping[str, Any]] | None
    now: datetime | None
    revoke_all: bool
    courses: Iterable[str] | None
    seat_host: str | None


def one_pass(
    store: CourseStore,
    *,
    guard: Callable[[], bool] | None = None,
    drift: bool = False,
    actor: str = AGENT_ACTOR,
    **plan: Unpack[PlanOptions],
) -> Pass:
    """Plan (``plan``: the keywords of :func:`plan_all`) and apply once (what ``gpuseat apply`` does, and
    each of the agent's passes)."""
    planned = plan_all(store, **plan)
    return apply_all(store, planned, guard=guard, drift=drift, actor=actor, writes=not plan["runner"].dry_run)
