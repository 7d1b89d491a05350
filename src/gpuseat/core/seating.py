"""Which seat suits which participant, and how a seat's state may change: pure rules, no database.

A seat suits a group when it is not reserved for other groups, has at least the group's GPU memory,
isolates as well as the group needs (a whole GPU > a MIG/vGPU partition > a shared GPU) and can run
the group's guest OS (Windows needs a virtual machine). Among suitable seats the least wasteful comes
first (own hardware before cloud machines, reserved for the group, then the smallest memory, then the
seat key), so assigning is stable and deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, cast, get_args

if TYPE_CHECKING:  # a type here only: store reads of seats load no Pydantic
    from gpuseat.core.needs import SeatNeed

SeatKind = Literal["gpu", "mig", "vgpu", "shared", "cloud", "slurm", "vm"]
EngineName = str  # a name from the engine registry (gpuseat.engines.registry), checked where it is stored
SeatState = Literal["planned", "requested", "running", "failed", "released"]
ClaimMode = Literal["assigned", "pool"]

#: the same values as tuples, for checks and choices (each literal's values written once)
SEAT_KINDS: tuple[str, ...] = get_args(SeatKind)
SEAT_STATES: tuple[str, ...] = get_args(SeatState)
CLAIM_MODES: tuple[str, ...] = get_args(ClaimMode)

# Who the agent's and the engines' writes are logged as; the store's request queue tells the agent's own
# writes apart by it (a change it made itself does not wake it).
AGENT_ACTOR = "gpuseat-agent"

# States a seat can be handed out in (a failed or released seat is skipped until it is requested again).
ASSIGNABLE_STATES: tuple[str, ...] = ("planned", "requested", "running")

# state → states it may move to (staying in the same state just updates the reason and time)
TRANSITIONS: dict[str, frozenset[str]] = {
    "planned": frozenset({"requested", "running", "failed", "released"}),
    "requested": frozenset({"planned", "running", "failed", "released"}),
    "running": frozenset({"requested", "failed", "released"}),
    "failed": frozenset({"planned", "requested", "running", "released"}),
    "released": frozenset({"planned", "requested"}),
}

_ISOLATION_RANK = {"shared": 0, "partitioned": 1, "dedicated": 2}
KIND_ISOLATION: dict[str, str] = {
    "gpu": "dedicated",
    "vm": "dedicated",
    "cloud": "dedicated",
    "slurm": "dedicated",
    "mig": "partitioned",
    "vgpu": "partitioned",
    "shared": "shared",
}
_VM_KINDS = frozenset({"vm", "vgpu", "cloud"})

# Names that later become libvirt domain names, file names, Slurm and k8s labels: a strict pattern. Check
# a name with fullmatch: match lets "$" stand before a final newline (pydantic takes the pattern too, and
# its regex has no \Z), so "dl-2016\n" was stored as a course key.
KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
COURSE_KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def recorded_state(current: str) -> SeatState:
    """A seat's state once an engine records the machine it will run on: a planned, released or failed
    seat becomes requested (its machine is on the way); a requested or running one stays as it is."""
    return "requested" if current in ("planned", "released", "failed") else cast(SeatState, current)


def transition_error(current: str, new: str) -> str | None:
    """Why a seat cannot go from ``current`` to ``new`` (None when it can)."""
    if new not in SEAT_STATES:
        return f"unknown state {new!r} (one of {', '.join(SEAT_STATES)})"
    if new == current or new in TRANSITIONS[current]:
        return None
    allowed = ", ".join(sorted(TRANSITIONS[current]))
    return f"a {current} seat cannot become {new} (it can become {allowed})"


def misfit(
    *,
    kind: str,
    memory_gb: float | None,
    engine: str,
    reserved_for: Sequence[str],
    group: str | None,
    need: SeatNeed | None,
) -> str | None:
    """Why a seat does not suit a participant of ``group`` with ``need`` (None when it does)."""
    if reserved_for and group not in reserved_for:
        return f"reserved for group(s) {', '.join(reserved_for)}"
    if need is None:
        return None
    if memory_gb is not None and memory_gb + 1e-9 < need.min_gpu_memory_gb:
        return f"{memory_gb:g} GB of GPU memory, the group needs {need.min_gpu_memory_gb:g} GB"
    isolation = KIND_ISOLATION.get(kind, "shared")
    if _ISOLATION_RANK[isolation] < _ISOLATION_RANK[need.isolation]:
        return f"a {kind} seat is {isolation}, the group needs {need.isolation}"
    if need.guest_os == "windows" and kind not in _VM_KINDS and engine != "libvirt":
        return f"a {kind} seat on {engine} is not a virtual machine, the group needs Windows"
    return None


def preference(
    *, key: str, kind: str, memory_gb: float | None, reserved_for: Sequence[str], group: str | None
) -> tuple[int, int, float, str]:
    """Sort key among suitable seats: own hardware before rented cloud machines (a cloud seat can stay
    unlaunched), then seats reserved for the group, then the smallest, then by key."""
    reserved = 0 if (group is not None and group in reserved_for) else 1
    return (int(kind == "cloud"), reserved, memory_gb if memory_gb is not None else float("inf"), key)


def seat_keys(prefix: str, count: int, start: int = 1) -> list[str]:
    """``seat-01`` … numbered keys, wide enough for ``count`` (used when seats are made in bulk)."""
    width = max(2, len(str(start + count - 1)))
    return [f"{prefix}-{i:0{width}d}" for i in range(start, start + count)]


# The rules above, as numbers the store's claim statement compares in SQL (see gpuseat.store.claims).
VM_KINDS: tuple[str, ...] = tuple(sorted(_VM_KINDS))


def isolation_rank(isolation: str) -> int:
    """0 shared, 1 partitioned, 2 dedicated: how strongly a kind of seat (or a need) isolates."""
    return _ISOLATION_RANK[isolation]
