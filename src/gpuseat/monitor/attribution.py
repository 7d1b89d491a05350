"""Who is on which seat: process → seat → participant by GPU or MIG UUID, pid → Unix user via /proc.

A process is *foreign* when the seat it runs on belongs to a participant whose Unix login is not
the process's user (a participant's job on someone else's seat, or a stranger on a seat).
"""

from __future__ import annotations

import pwd
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from pathlib import Path

from gpuseat.readings import (
    Attributed,
    GpuProcess,
    Leaf,
    LeafReading,
    SeatMap,
    Snapshot,
    frozen_factory,
    leaves,
    new_leaf_reading,
)

__all__ = [
    "attribute",
    "observe_seats",
    "proc_user",
    "proc_users",
    "seat_states",
]


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


_attributed: Callable[[GpuProcess, str | None, str | None, str | None, bool], Attributed] = frozen_factory(Attributed)


def attribute(snapshot: Snapshot, seats: SeatMap, users: Mapping[int, str | None]) -> list[Attributed]:
    """Attach user, seat, participant and the foreign flag to every process of the snapshot.

    A user the source already knows (``GpuProcess.user``, e.g. from the remote host's ``ps``) wins
    over ``users`` (this machine's ``/proc``).
    """
    return _attribute(snapshot, seats, users, None)


def _attribute(
    snapshot: Snapshot,
    seats: SeatMap,
    users: Mapping[int, str | None],
    by_leaf: dict[str, list[Attributed]] | None,
) -> list[Attributed]:
    """:func:`attribute`; with ``by_leaf`` also groups the result by leaf device in the same pass."""
    owners, allowed, known, make = seats.owners, seats.allowed_users, users.get, _attributed
    out: list[Attributed] = []
    append = out.append
    for p in snapshot.processes:  # the hot loop of a tick: one dict lookup per device, no per-seat work
        mig = p.mig_uuid
        owner = owners.get(mig) if mig is not None else None
        if owner is None:
            owner = owners.get(p.gpu_uuid)
        user = p.user if p.user is not None else known(p.pid)
        if owner is None:
            a = make(p, user, None, None, False)
        else:
            seat, participant, login = owner
            foreign = user is not None and login is not None and user != login and user not in allowed
            a = make(p, user, seat, participant, foreign)
        append(a)
        if by_leaf is not None:
            key = mig or p.gpu_uuid
            group = by_leaf.get(key)
            if group is None:
                by_leaf[key] = [a]
            else:
                group.append(a)
    return out


def observe_seats(
    snapshot: Snapshot, seats: SeatMap, users: Mapping[int, str | None]
) -> tuple[list[Attributed], list[LeafReading]]:
    """:func:`attribute` and :func:`seat_states` in one pass over the processes (the monitor's tick)."""
    by_leaf: dict[str, list[Attributed]] = {}
    attributed = _attribute(snapshot, seats, users, by_leaf)
    return attributed, _states(snapshot, seats, by_leaf)


def seat_states(snapshot: Snapshot, seats: SeatMap, attributed: Iterable[Attributed]) -> list[LeafReading]:
    """One :class:`LeafReading` per leaf device (MIG instance, or GPU without MIG).

    A process on a MIG-mode GPU whose MIG device the source does not say (``--query-compute-apps``
    CSV) is shown on an extra whole-GPU state, so it never vanishes from seats and metrics.
    """
    by_leaf: dict[str, list[Attributed]] = {}
    for a in attributed:
        key = a.process.mig_uuid or a.process.gpu_uuid
        by_leaf.setdefault(key, []).append(a)
    return _states(snapshot, seats, by_leaf)


def _states(snapshot: Snapshot, seats: SeatMap, by_leaf: dict[str, list[Attributed]]) -> list[LeafReading]:
    """The states of :func:`seat_states` from processes already grouped by leaf (``by_leaf`` is emptied)."""
    by_device, pop, make = seats.by_device, by_leaf.pop, new_leaf_reading
    out: list[LeafReading] = []
    append = out.append
    for leaf in leaves(snapshot):
        key = leaf.uuid or ""
        entry = by_device.get(key) if leaf.uuid else None
        append(make(leaf, entry, tuple(pop(key, ()))))
    if by_leaf:  # processes on a MIG-mode GPU without a MIG device (CSV), or on no listed device
        for gpu in snapshot.gpus:
            if gpu.mig and gpu.uuid in by_leaf:
                leaf = Leaf(gpu.uuid, gpu, None, f"{gpu.index}/?")
                append(make(leaf, by_device.get(gpu.uuid), tuple(pop(gpu.uuid))))
    return out
