"""The one engine interface: an engine *plans* what its machines must change to match the store,
*applies* those changes one idempotent step at a time, *observes* what access exists on its machines
now, *checks* seats as their participants and says how to *connect*.

It is mig-parted's shape (a spec, ``assert``, ``apply``) for seats: the store is the spec, ``plan`` is
the assert (an empty plan means the machines match), ``apply`` carries the steps out. A plan is
computed from the machines as they are, so running the same plan twice, or an agent killed mid-way
and restarted, never does a step twice to effect.

Hand-over rule: steps run by phase, ``revoke`` before ``grant`` before ``record``; a grant or record
on a seat whose earlier step failed is skipped (the new holder never shares a GPU with the old one), and the seat
keeps showing "being prepared" until its ``record`` step has written the new holder's way in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar, cast, runtime_checkable

from gpuseat.engines.runner import Ran, Runner
from gpuseat.errors import GpuseatError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gpuseat.core.readiness import Access, Readiness
    from gpuseat.store import CourseStore, CourseView, ParticipantView, SeatView
    from gpuseat.store.requests import RequestView

Phase = Literal["revoke", "grant", "record"]
PHASES: tuple[Phase, ...] = ("revoke", "grant", "record")
OutcomeState = Literal["done", "failed", "skipped"]
SettingsT = TypeVar("SettingsT", bound="BaseModel")

#: the first word of a step's action says which way it goes: "-" takes access away, "+" gives it, "~" updates
_SIGNS = {
    "remove": "-",
    "lock": "-",
    "revoke": "-",
    "end": "-",
    "cancel": "-",
    "stop": "-",
    "delete": "-",
    "add": "+",
    "set": "~",
    "grant": "+",
    "unlock": "+",
    "create": "+",
    "launch": "+",
    "start": "+",
    "reimage": "~",
    "record": "~",
    "clear": "~",
}


@dataclass(frozen=True)
class Step:
    """One idempotent change on one machine, for one reason.

    ``action`` is ``thing.verb`` (``account.add``, ``key.remove``, ``device.grant``, ``jobs.cancel``,
    ``domain.reimage``, ``hub.server.stop``, ``cloud.launch``, ``seat.record`` …); ``target`` names
    what it acts on (a login, a device file, a domain); ``why`` says, for a person, why (``ben released
    seat-02``). ``data`` carries what ``apply`` needs (JSON values). ``seats`` are the seats whose
    hand-over waits for this step (a failed revoke blocks the grants on them).
    """

    engine: str
    action: str
    target: str
    why: str
    phase: Phase = "grant"
    participant: str | None = None
    seats: tuple[str, ...] = ()
    host: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def sign(self) -> str:
        """``-`` takes access away, ``+`` gives it, ``~`` changes or records."""
        return _SIGNS.get(self.action.rsplit(".", 1)[-1], "~")

    @property
    def key(self) -> str:
        """What the step acts on, stable across plans (the same step planned twice has one key)."""
        return f"{self.engine}:{self.host or ''}:{self.action}:{self.target}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``apply --format json``, the events log)."""
        return {
            "engine": self.engine,
            "host": self.host,
            "action": self.action,
            "sign": self.sign,
            "target": self.target,
            "participant": self.participant,
            "seats": list(self.seats),
            "phase": self.phase,
            "why": self.why,
        }


@dataclass
class _ForCourse:
    """What a plan and its apply report both carry: the engine, the course, the host (when the engine
    has several) and notes for a person."""

    engine: str
    course: str
    host: str | None = None
    notes: list[str] = field(default_factory=list)

    def _named(self) -> dict[str, Any]:
        """The engine, course and host: the first keys of the JSON form."""
        return {"engine": self.engine, "course": self.course, "host": self.host}


@dataclass
class Changes(_ForCourse):
    """An engine's plan for one course (on one host): the steps, in order, and notes for a person."""

    steps: list[Step] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when the machines already match the store."""
        return not self.steps

    def ordered(self) -> list[Step]:
        """The steps by phase (revoke, grant, record), each phase in planned order."""
        return sorted(self.steps, key=lambda s: PHASES.index(s.phase))

    def counts(self) -> dict[str, int]:
        """How many steps give, change and take away access (the plan's summary line)."""
        out = {"+": 0, "~": 0, "-": 0}
        for s in self.steps:
            out[s.sign] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**self._named(), "steps": [s.to_dict() for s in self.ordered()], "notes": list(self.notes)}


@dataclass
class Outcome:
    """What became of one step: done, failed (with why) or skipped (with why), and the commands it ran."""

    step: Step
    state: OutcomeState
    message: str | None = None
    commands: list[Ran] = field(default_factory=list)
    seconds: float = 0.0
    exit_code: int = 0  # a failed step: 2 when the store's data is wrong (bad input), else 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            **self.step.to_dict(),
            "state": self.state,
            "exit_code": self.exit_code,
            "message": self.message,
            "seconds": round(self.seconds, 4),
            "commands": [c.to_dict() for c in self.commands],
        }


@dataclass
class ApplyReport(_ForCourse):
    """What one ``apply`` did: one outcome per step."""

    outcomes: list[Outcome] = field(default_factory=list)
    dry_run: bool = False

    @property
    def failed(self) -> list[Outcome]:
        """The steps that failed."""
        return [o for o in self.outcomes if o.state == "failed"]

    @property
    def done(self) -> list[Outcome]:
        """The steps carried out."""
        return [o for o in self.outcomes if o.state == "done"]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        outcomes = [o.to_dict() for o in self.outcomes]
        return {**self._named(), "dry_run": self.dry_run, "outcomes": outcomes, "notes": list(self.notes)}


@dataclass(frozen=True)
class Holding:
    """One piece of access that exists on a machine now (what ``observe`` finds): an account that can
    log in, a key, an open device, a running process or job, a hub server, a VM, a cloud cluster."""

    engine: str
    what: str
    login: str
    participant: str | None = None
    seat: str | None = None
    host: str | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: every field, in order (what ``engine_holdings`` stores)."""
        return asdict(self)


@dataclass(frozen=True)
class CourseState:
    """What the store says about one course, for one engine: the wanted state an engine plans towards.

    ``course`` is None for a course that is gone from the store (deleted) but whose accounts an
    engine still holds: its plan takes every access away. ``closed`` is why participants may not use
    their seats right now (an access window or session schedule that is shut), else None.
    """

    key: str
    course: CourseView | None
    seats: tuple[SeatView, ...]
    people: Mapping[str, ParticipantView]
    access: Mapping[str, Mapping[str, Any]]
    archived: bool = False
    closed: str | None = None
    next_change: datetime | None = None  # when the access window next opens or closes (None: never again)
    now: datetime | None = None
    wake_at: datetime | None = None  # when a pass next plans differently: ``next_change`` or a session's lead or end
    read_at: datetime | None = None  # the store's time ``closed`` and ``next_change`` were worked out at

    @property
    def active(self) -> bool:
        """True while the course's holders should have access (not archived, deleted or shut)."""
        return self.course is not None and not self.archived

    def holders(self) -> list[tuple[SeatView, ParticipantView]]:
        """(seat, participant) for every held seat of the course (the wanted access)."""
        out = []
        for seat in self.seats:
            if seat.participant and seat.participant in self.people:
                out.append((seat, self.people[seat.participant]))
        return out


def stale_requests(
    pending: Iterable[RequestView], holders: Mapping[str, ParticipantView]
) -> list[tuple[RequestView, str]]:
    """The pending requests on seats their asker holds no more (``holders``: seat key → holder), each with
    why it is refused; the rest are carried out by the engine."""
    return [(r, why) for r in pending if (why := stale_reason(r, holders)) is not None]


#: how the record of a key request whose asker left its seat first begins: the key is the participant's (stored
#: when they asked), and the engine of the seat they hold now (or get next) installs it, so it is done, not failed.
#: Said of any seat, also one that takes no SSH key (a JupyterHub or Kubernetes seat): the key waits for one that does
KEY_KEPT = "stored: your key is installed on the seat you hold now (or get next) if that seat takes an SSH key"


def stale_reason(r: RequestView, holders: Mapping[str, ParticipantView]) -> str | None:
    """Why request ``r`` is not carried out on its seat (``holders``: seat key → holder): its asker holds
    that seat no more (moved, released); None while they do. A key request is kept (:data:`KEY_KEPT`): its
    asker's old key is already out wherever they hold a seat, so "failed" would send them back to it."""
    p = holders.get(r.seat or "")
    if p is not None and p.key == r.participant:
        return None
    if r.action == "key":
        return f"{KEY_KEPT}; you left {r.seat} before it was installed there"
    return f"{r.participant} holds {r.seat} no more"


def refused_outcome(d: Mapping[str, Any]) -> tuple[bool, str] | None:
    """The outcome of a ``request.record`` whose plan did not carry the request out (its ``refused``): failed
    with why, but done for a key kept for its asker's seat now (:func:`stale_reason`); None when carried out."""
    refused = d.get("refused")
    if not refused:
        return None
    return d.get("request") == "key" and str(refused).startswith(KEY_KEPT), str(refused)


#: the requests that make a seat run (a ``stop`` stops it, a ``key`` leaves it as it is)
RUN_REQUESTS = ("start", "restart", "reset")


def plan_holder_requests(
    changes: Changes,
    mine: Iterable[RequestView],
    running: bool,
    refusals: Mapping[str, str],
    run: Callable[[RequestView], None],
    record: Callable[[RequestView, str | None], Step],
) -> bool:
    """Plan one holder's requests on their seat, oldest first, the same way on every engine whose seats
    can be stopped: a ``stop`` stops the seat; a start, restart or reset is refused with ``refusals``'
    reason for its action, else the seat runs and ``run`` adds the engine's steps for it; each request
    ends in its ``record`` step. Returns whether the seat runs once they are done.

    A request that a later one of the same pass undoes is not carried out, and its record says which
    (the later one is what the participant meant): a stop before a start, restart or reset that runs, or
    a start, restart or reset before a stop. Carrying out both would leave the earlier one "failed" for
    a reason that was not true (a stop that "could not lock", when the start after it had unlocked)."""
    todo = list(mine)
    for i, r in enumerate(todo):
        later = todo[i + 1 :]
        refused = None
        if r.action == "stop":
            undo = next((x for x in later if x.action in RUN_REQUESTS and refusals.get(x.action) is None), None)
            if undo is None:
                running = False
            else:
                refused = f"not carried out: your {undo.action} (request {undo.id}) came after it"
        elif r.action in RUN_REQUESTS:
            stop = next((x for x in later if x.action == "stop"), None)
            refused = refusals.get(r.action)
            if refused is None and stop is not None:
                refused = f"not carried out: your stop (request {stop.id}) came after it"
            if refused is None:
                running = True
                run(r)
        changes.steps.append(record(r, refused))
    return running


def ssh_access(
    host: str | None, login: str, holder: str, device_uuid: str | None, port: int | None = None, jump: str | None = None
) -> Access:
    """The way in over SSH as ``login`` for ``holder``, with the command to paste once ``host`` is known."""
    from gpuseat.core.delivery import ssh_command
    from gpuseat.core.readiness import Access

    command = ssh_command(host, login, port, jump) if host else None
    return Access(
        kind="ssh", host=host, port=port, user=login, jump_host=jump, command=command, device_uuid=device_uuid,
        holder=holder,
    )  # fmt: skip


def record_machine(
    store: CourseStore, course: str, seat: SeatView, engine: str, ref: str, reason: str, host: str | None = None
) -> None:
    """Store that ``seat`` will run on the engine's machine ``ref`` (a cluster, a GPU on a node): a planned,
    released or failed seat becomes requested, a requested or running one keeps its state."""
    from gpuseat.core.seating import recorded_state

    store.seats.set_seat_state(
        course, seat.key, recorded_state(seat.state), reason=reason, engine=engine, engine_ref=ref, host=host
    )


@runtime_checkable
class Engine(Protocol):
    """The interface every seat engine implements (see the module docstring)."""

    name: str

    def plan(self, course: CourseState) -> Changes:
        """The steps that make the machines match ``course`` (empty when they already do)."""
        ...

    def apply(self, changes: Changes, *, guard: Callable[[], bool] | None = None) -> ApplyReport:
        """Carry out ``changes`` step by step (each idempotent); ``guard`` is asked before each step and
        a False stops the apply (an agent that lost its lease)."""
        ...

    def observe(self, course: CourseState) -> list[Holding]:
        """What access exists on the machines now for ``course`` (accounts, keys, processes, jobs …)."""
        ...

    def check(self, seats: Sequence[SeatView]) -> list[Readiness]:
        """Probe each held seat as its participant (ready = exactly their GPU)."""
        ...

    def connect(self, seat: SeatView) -> Access | None:
        """How the seat's holder reaches it now (None while it is being prepared)."""
        ...


#: why a step was not carried out when the guard stopped the pass (an agent's lease ran out, or a row that takes
#: access away came under it: engines/agent.py)
STOPPED = (
    "the pass stopped before this step (its lease ran out, or a release or move came since its plan): the next pass "
    "plans it again"
)


class StepEngine(Generic[SettingsT]):
    """The apply loop every engine shares: steps by phase, each timed with the commands it ran; a
    failed revoke blocks the grants on its seats; a guard that says no stops the run.

    An engine names its settings model in ``settings_model``, implements :meth:`do` for its own
    actions and sets up its own parts in :meth:`setup`.
    """

    name: ClassVar[str] = ""
    settings_model: ClassVar[type[BaseModel]]

    def __init__(
        self, store: CourseStore, course: str, *, settings: SettingsT | None = None, runner: Runner,
        host: str | None = None,
    ) -> None:  # fmt: skip
        """Every engine is built the same way (``registry.build``): the store, the course, its settings
        (the model's defaults when None), the one Runner, and the host it acts for when it has several."""
        self.store, self.course, self.runner, self.host = store, course, runner, host
        self.settings: SettingsT = settings if settings is not None else cast("SettingsT", self.settings_model())
        self.setup()

    def setup(self) -> None:
        """An engine's own parts, built from ``self.settings`` (nothing by default)."""

    def _step(self, action: str, target: str, why: str, phase: Phase, **data: Any) -> Step:
        """A step of this engine on its host; ``participant`` and ``seats`` in ``data`` fill those fields,
        the rest is the step's data."""
        participant = data.pop("participant", None)
        seats = tuple(data.pop("seats", ()))
        return Step(self.name, action, target, why, phase, participant, seats, self.host, data)

    def pending_requests(self, seats: Container[str]) -> list[RequestView]:
        """The course's pending seat requests on ``seats`` (the ones this engine carries out), oldest first."""
        rows = self.store.requests.seat_requests(self.course, pending=True, limit=10_000)
        return sorted((r for r in rows if r.seat in seats), key=lambda r: r.id)

    def _clear_step(self, key: str, **data: Any) -> Step:
        """``seat.clear`` for seat ``key``, which nobody holds: its stored way in must name no one."""
        why = "nobody holds it: its way in names no one"
        return self._step("seat.clear", key, why, "record", seats=(key,), **data)

    def _record_step(self, key: str, participant: str, why: str, **data: Any) -> Step:
        """``seat.record`` for seat ``key``: the way in made for its holder ``participant`` is stored."""
        return self._step("seat.record", key, why, "record", participant=participant, seats=(key,), **data)

    def _request_step(self, r: RequestView, refused: str | None, target: str | None = None, **data: Any) -> Step:
        """``request.record``, which ends request ``r``: done once the machine shows it, else failed with
        why; ``refused`` says why it was not carried out at all. Tied to no seat, so it always runs."""
        why = f"{r.participant} asked for {r.action}" + (f" ({refused})" if refused else "")
        return self._step("request.record", target or f"request {r.id}", why, "record", participant=r.participant,
                          id=r.id, request=r.action, refused=refused, **data)  # fmt: skip

    def login_of(self, p: ParticipantView) -> str:
        """The participant's login name: the one rule of every engine (:func:`gpuseat.core.delivery.login_name`)."""
        from gpuseat.core.delivery import login_name

        return login_name(p.key, p.unix_user)

    def do(self, step: Step) -> str | None:
        """Carry out one step; return a short note (or None). Raise a GpuseatError to fail it."""
        raise NotImplementedError

    def record_way_in(self, step: Step, *, running: bool = True) -> None:
        """The usual record steps, for engines whose ``do`` has no more to do for them: ``seat.record``
        (the way in made for the holder, and the seat running) and ``seat.clear`` (a way in that names
        nobody). With ``running=False`` (engines whose hub or cluster says when a seat runs) the seat's
        state is left alone and ``seat.clear`` removes the way in. A dry run writes nothing."""
        from gpuseat.core.readiness import Access
        from gpuseat.core.seating import AGENT_ACTOR

        if self.runner.dry_run:
            return
        actor = AGENT_ACTOR
        if step.action == "seat.clear" and not running:
            self.store.delivery.record_delivery(self.course, step.target, clear_access=True, actor=actor)
            return
        access = Access.from_dict(dict(step.data["access"]))
        if step.action == "seat.record" and running:
            self.store.delivery.record_delivery(
                self.course, step.target, access=access, state="running", reason=f"{self.name}: applied",
                actor=actor,
            )  # fmt: skip
        else:
            self.store.delivery.record_delivery(self.course, step.target, access=access, actor=actor)

    def connect(self, seat: SeatView) -> Access | None:
        """The stored way in, only when it was made for the seat's current holder (else: being prepared)."""
        from gpuseat.core.readiness import Access

        stored = self.store.delivery.access_of(self.course).get(seat.key)
        if not stored or not seat.participant or stored.get("holder") != seat.participant:
            return None
        return Access.from_dict(stored)

    def probe(self, seat: SeatView, participant: ParticipantView) -> Readiness:
        """Run a GPU-listing probe as ``participant`` on ``seat`` (each engine its own way)."""
        raise NotImplementedError

    def check(self, seats: Sequence[SeatView]) -> list[Readiness]:
        """Probe each held seat as its participant, in turn (``seats check`` runs probes in parallel)."""
        people = {p.key: p for p in self.store.roster.participants(self.course)}
        return [self.probe(s, people[s.participant]) for s in seats if s.participant in people]

    def apply(self, changes: Changes, *, guard: Callable[[], bool] | None = None) -> ApplyReport:
        """See :meth:`Engine.apply`."""
        report = ApplyReport(changes.engine, changes.course, changes.host, notes=list(changes.notes))
        report.dry_run = self.runner.dry_run
        blocked: dict[str, str] = {}
        stopped = False
        for step in changes.ordered():
            if stopped or (guard is not None and not guard()):
                stopped = True
                report.outcomes.append(Outcome(step, "skipped", STOPPED))
                continue
            if step.phase != "revoke":
                held = next((blocked[s] for s in step.seats if s in blocked), None)
                if held is not None:
                    report.outcomes.append(Outcome(step, "skipped", f"waits for: {held}"))
                    continue
            self.runner.take()
            started = time.monotonic()
            code = 0
            try:
                note = self.do(step)
                state: OutcomeState = "done"
            except GpuseatError as exc:
                note, state, code = exc.message, "failed", exc.exit_code
            except OSError as exc:
                note, state, code = f"{type(exc).__name__}: {exc}", "failed", 1
            outcome = Outcome(step, state, note, self.runner.take(), time.monotonic() - started, code)
            report.outcomes.append(outcome)
            if state == "failed":  # what comes after on the same seats waits (revokes never wait)
                what = (note or "").partition("\nTo fix: ")[0]  # its fix is said once, on the failed step
                for s in step.seats:
                    blocked.setdefault(s, f"{step.action} {step.target} failed ({what})")
        return report
