"""The one seat-engine interface: what every engine that delivers seats (host, libvirt, JupyterHub,
Slurm, SkyPilot, Kubernetes) does for one seat, so the CLI, the portal and ``seats check`` never
need engine-specific code.

An engine *provisions* a seat for its participant, says how to *connect* (a structured
:class:`Access`, never a bare string), *probes* the seat as the participant and reports what the
participant really sees (:class:`Readiness`: ready means exactly one visible GPU, and its UUID is the
seat's), *revokes* the holder's access (release, move, course end) and *tears down* what it made.
State changes and access details reach the store through one path that writes an events row;
engines never write seat rows themselves.

Engines are found by name through :data:`ENGINES` (``"module:Class"``, imported lazily so that a
missing optional dependency of one engine never breaks another). Each class is built as
``cls(store, course, **settings)`` where settings are plain strings from flags or the course's
engine settings.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from gpuseat.services.courses import CourseStore, ParticipantView, SeatView

AccessKind = Literal["ssh", "jupyter", "vm", "slurm", "web"]
ACCESS_KINDS: tuple[str, ...] = ("ssh", "jupyter", "vm", "slurm", "web")


@dataclass(frozen=True, slots=True)
class Access:
    """How a participant reaches their seat: what the participant page and ``seats connect`` show.

    ``command`` is ready to paste (``ssh -p 2222 -J gw ann@gpu1.example.org``, ``srun …``); ``url``
    is for web kinds (a hub, a portal). ``device_uuid`` is the seat's ``GPU-…`` or ``MIG-…`` UUID
    that the participant will see in ``CUDA_VISIBLE_DEVICES`` / ``nvidia-smi -L``.
    """

    kind: AccessKind
    host: str | None = None
    port: int | None = None
    user: str | None = None
    jump_host: str | None = None
    command: str | None = None
    url: str | None = None
    device_uuid: str | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what the store keeps and ``--format json`` prints)."""
        out = asdict(self)
        out["notes"] = list(self.notes)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Access:
        """The inverse of :meth:`to_dict` (unknown keys are ignored)."""
        names = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in names}
        values["notes"] = tuple(values.get("notes") or ())
        return cls(**values)


ReadyState = Literal["ready", "broken"]


@dataclass(frozen=True, slots=True)
class Readiness:
    """What a probe run *as the participant* saw on their seat.

    ``ready`` only when exactly one GPU was visible and its UUID is the seat's; otherwise
    ``reason`` says what is wrong in one line and ``evidence`` keeps what the probe printed.
    """

    course: str
    seat: str
    participant: str | None
    state: ReadyState
    reason: str | None
    evidence: str
    visible: tuple[str, ...]
    checked_at: datetime
    engine: str
    bench: dict[str, Any] | None = field(default=None)

    @property
    def ready(self) -> bool:
        """True when the participant sees exactly their seat's GPU."""
        return self.state == "ready"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the documented ``seats check --format json`` row)."""
        out = asdict(self)
        out["visible"] = list(self.visible)
        out["checked_at"] = self.checked_at.isoformat()
        return out


@runtime_checkable
class SeatEngine(Protocol):
    """The interface every seat engine implements (one per concern, like mig-parted's managers)."""

    name: str

    def provision(self, seat: SeatView, participant: ParticipantView | None) -> Access | None:
        """Make the seat usable by its participant; returns how to connect (None when not yet known)."""
        ...

    def connect(self, seat: SeatView) -> Access | None:
        """How the seat's holder reaches it now (None when the engine cannot tell yet)."""
        ...

    def probe(self, seat: SeatView, participant: ParticipantView) -> Readiness:
        """Run a GPU-listing probe as the participant on their seat and judge what it saw."""
        ...

    def revoke(self, seat: SeatView, participant: ParticipantView) -> None:
        """The participant loses access to the seat (release, move, course end)."""
        ...

    def teardown(self, seat: SeatView) -> None:
        """Remove what :meth:`provision` made for the seat."""
        ...


# engine name -> "module:Class"; imported only when that engine is used.
ENGINES: dict[str, str] = {
    "host": "gpuseat.services.host_engine:HostEngine",
    "libvirt": "gpuseat.services.vms:LibvirtEngine",
    "jupyterhub": "gpuseat.services.hub:JupyterHubEngine",
    "slurm": "gpuseat.services.slurm:SlurmEngine",
    "skypilot": "gpuseat.services.cloud:SkyPilotEngine",
}


# engine name -> what makes a change of holder (move, release) real for that engine's seats: the store
# change alone does not reach the machines; ``seats move``/``release`` print this next step.
APPLY_CHANGES: dict[str, str] = {
    "host": "gpuseat host up --course {course}   (as root on the GPU server: keys, accounts, devices follow)",
    "libvirt": "gpuseat vms up --course {course}   (on the libvirt host: a new holder gets a fresh disk and seed)",
    "jupyterhub": "stop the old holder's running server (hub admin page); the hooks give the next start its seat",
    "slurm": "gpuseat slurm enroll --course {course}   (per-person limits and sessions follow the store)",
    "skypilot": "gpuseat seats skypilot --course {course} --out sky/ … && sh sky/launch.sh   (a hand-over: the "
    "earlier holder's keys are removed, their account expired)",
}


def apply_hints(course: str, engines: list[str]) -> list[str]:
    """The next step for each engine among ``engines`` after a change of holder (manual seats: none)."""
    return [APPLY_CHANGES[e].format(course=course) for e in sorted(set(engines)) if e in APPLY_CHANGES]


def load_engine(name: str, store: CourseStore, course: str, **settings: str) -> SeatEngine:
    """The engine called ``name`` for ``course``, built with ``settings`` (plain strings)."""
    from gpuseat.errors import InputError

    target = ENGINES.get(name)
    if target is None:
        raise InputError(
            f"no seat engine called {name!r}",
            where="engine",
            fix=f"use one of {', '.join(sorted(ENGINES))}",
        )
    module, _, cls_name = target.partition(":")
    cls = getattr(importlib.import_module(module), cls_name)
    engine: SeatEngine = cls(store, course, **settings)
    return engine


def judge(expected_uuid: str | None, visible: tuple[str, ...]) -> tuple[ReadyState, str | None]:
    """The one readiness rule: exactly one visible device, and it is the seat's."""
    if not visible:
        return "broken", "no GPU visible to the participant"
    if len(visible) > 1:
        return "broken", f"{len(visible)} GPUs visible to the participant (expected exactly one)"
    if expected_uuid and visible[0] != expected_uuid:
        return "broken", f"the participant sees {visible[0]}, not the seat's {expected_uuid}"
    return "ready", None
