"""What a participant sees of their seat: how to reach it (:class:`Access`) and what a probe run as them
saw (:class:`Readiness`), with the one readiness rule (:func:`judge`).

Pure values shared by the store, the engines and the front ends, so that none of them imports another
to name them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

AccessKind = Literal["ssh", "jupyter", "vm", "slurm", "web", "kubernetes"]
ACCESS_KINDS: tuple[str, ...] = ("ssh", "jupyter", "vm", "slurm", "web", "kubernetes")


@dataclass(frozen=True, slots=True)
class Access:
    """How a participant reaches their seat: what the participant page and ``seats connect`` show.

    ``command`` is ready to paste (``ssh -p 2222 -J gw ann@gpu1.example.org``, ``srun …``); ``url``
    is for web kinds (a hub, a portal). ``device_uuid`` is the seat's ``GPU-…`` or ``MIG-…`` UUID
    that the participant will see in ``CUDA_VISIBLE_DEVICES`` / ``nvidia-smi -L``. ``holder`` is the
    participant the engine made it for: after a move or release the seat's next holder sees "being
    prepared" until the engine has applied the change, never the previous holder's login.
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
    holder: str | None = None  # the participant this way in was made for: shown to nobody else

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


def judge(expected_uuid: str | None, visible: tuple[str, ...]) -> tuple[ReadyState, str | None]:
    """The one readiness rule: exactly one visible device, and it is the seat's."""
    if not visible:
        return "broken", "no GPU visible to the participant"
    if len(visible) > 1:
        return "broken", f"{len(visible)} GPUs visible to the participant (expected exactly one)"
    if expected_uuid and visible[0] != expected_uuid:
        return "broken", f"the participant sees {visible[0]}, not the seat's {expected_uuid}"
    return "ready", None
