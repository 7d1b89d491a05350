"""Who is on which seat: process → seat → participant by GPU or MIG UUID, pid → Unix user via /proc.

A process is *foreign* when the seat it runs on belongs to a participant whose Unix login is not
the process's user (a participant's job on someone else's seat, or a stranger on a seat).
"""

from __future__ import annotations

import pwd
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from gpuseat.monitor.model import Attributed, Leaf, Snapshot, leaves


@dataclass(frozen=True, slots=True)
class SeatEntry:
    """One seat: the device it owns and the participant (and Unix login) it is assigned to."""

    seat: str
    device_uuid: str
    participant: str | None = None
    user: str | None = None  # Unix login; defaults to the participant id
    host: str | None = None
    profile: str | None = None

    @property
    def login(self) -> str | None:
        """The Unix user expected on this seat."""
        return self.user or self.participant


class SeatMap:
    """Seats by device UUID; ``allowed_users`` (e.g. ``root`` for Xorg) are never foreign."""

    def __init__(self, entries: Iterable[SeatEntry] = (), *, allowed_users: Iterable[str] = ()) -> None:
        self.entries = tuple(entries)
        self.by_device = {e.device_uuid: e for e in self.entries}
        self.allowed_users = frozenset(allowed_users)

    def lookup(self, gpu_uuid: str, mig_uuid: str | None) -> SeatEntry | None:
        """The seat of a device: the MIG instance's seat first, else the whole GPU's."""
        if mig_uuid is not None and (entry := self.by_device.get(mig_uuid)) is not None:
            return entry
        return self.by_device.get(gpu_uuid)


@lru_cache(maxsize=4096)
def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def proc_user(pid: int, root: Path = Path("/proc")) -> str | None:
    """Login of the real uid of ``pid`` from ``<root>/<pid>/status``; None if gone or unreadable.

    Command line equivalent: ``ps -o user= -p PID``. The driver reports host pids, so this is
    only right on the host or in a container started with ``--pid=host``.
    """
    try:
        with open(root / str(pid) / "status", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("Uid:"):
                    return _user_name(int(line.split()[1]))
    except (OSError, ValueError, IndexError):
        return None
    return None


def proc_users(pids: Iterable[int], root: Path = Path("/proc")) -> dict[int, str | None]:
    """:func:`proc_user` for many pids."""
    return {pid: proc_user(pid, root) for pid in pids}


def attribute(snapshot: Snapshot, seats: SeatMap, users: Mapping[int, str | None]) -> list[Attributed]:
    """Attach user, seat, participant and the foreign flag to every process of the snapshot."""
    out = []
    for p in snapshot.processes:
        entry = seats.lookup(p.gpu_uuid, p.mig_uuid)
        user = users.get(p.pid)
        foreign = (
            entry is not None
            and user is not None
            and entry.login is not None
            and user != entry.login
            and user not in seats.allowed_users
        )
        out.append(
            Attributed(p, user, entry.seat if entry else None, entry.participant if entry else None, foreign)
        )
    return out


@dataclass(frozen=True, slots=True)
class SeatState:
    """One seat-sized device now: its seat (if any), its processes and whether it is in use."""

    leaf: Leaf
    entry: SeatEntry | None
    processes: tuple[Attributed, ...]

    @property
    def active(self) -> bool:
        """In use: a process holds it, or its utilisation is known and above zero."""
        util = self.leaf.utilization_gpu
        return bool(self.processes) or (util is not None and util > 0)


def seat_states(snapshot: Snapshot, seats: SeatMap, attributed: Iterable[Attributed]) -> list[SeatState]:
    """One :class:`SeatState` per leaf device (MIG instance, or GPU without MIG)."""
    by_leaf: dict[str, list[Attributed]] = {}
    for a in attributed:
        key = a.process.mig_uuid or a.process.gpu_uuid
        by_leaf.setdefault(key, []).append(a)
    out = []
    for leaf in leaves(snapshot):
        key = leaf.uuid or ""
        entry = seats.by_device.get(key) if leaf.uuid else None
        out.append(SeatState(leaf, entry, tuple(by_leaf.get(key, ()))))
    return out
