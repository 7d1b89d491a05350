"""Who is on which seat: process → seat → participant by GPU or MIG UUID, pid → Unix user via /proc.

A process is *foreign* when the seat it runs on belongs to a participant whose Unix login is not
the process's user (a participant's job on someone else's seat, or a stranger on a seat).
"""

from __future__ import annotations

import pwd
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path

from gpuseat.readings import Attributed, Leaf, SeatEntry, SeatMap, SeatState, Snapshot, leaves

__all__ = ["SeatEntry", "SeatMap", "SeatState", "attribute", "proc_user", "proc_users", "seat_states"]


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
    """Attach user, seat, participant and the foreign flag to every process of the snapshot.

    A user the source already knows (``GpuProcess.user``, e.g. from the remote host's ``ps``) wins
    over ``users`` (this machine's ``/proc``).
    """
    by_device, allowed = seats.by_device, seats.allowed_users
    out: list[Attributed] = []
    append = out.append
    for p in snapshot.processes:  # the hot loop of a tick: SeatMap.lookup and SeatEntry.login, inlined
        entry = by_device.get(p.mig_uuid) if p.mig_uuid is not None else None
        if entry is None:
            entry = by_device.get(p.gpu_uuid)
        user = p.user if p.user is not None else users.get(p.pid)
        if entry is None:
            append(Attributed(p, user, None, None, False))
            continue
        login = entry.user or entry.participant
        foreign = user is not None and login is not None and user != login and user not in allowed
        append(Attributed(p, user, entry.seat, entry.participant, foreign))
    return out


def seat_states(snapshot: Snapshot, seats: SeatMap, attributed: Iterable[Attributed]) -> list[SeatState]:
    """One :class:`SeatState` per leaf device (MIG instance, or GPU without MIG).

    A process on a MIG-mode GPU whose MIG device the source does not say (``--query-compute-apps``
    CSV) is shown on an extra whole-GPU state, so it never vanishes from seats and metrics.
    """
    by_leaf: dict[str, list[Attributed]] = {}
    for a in attributed:
        key = a.process.mig_uuid or a.process.gpu_uuid
        by_leaf.setdefault(key, []).append(a)
    out = []
    for leaf in leaves(snapshot):
        key = leaf.uuid or ""
        entry = seats.by_device.get(key) if leaf.uuid else None
        out.append(SeatState(leaf, entry, tuple(by_leaf.pop(key, ()))))
    for gpu in snapshot.gpus:
        if gpu.mig and gpu.uuid in by_leaf:
            leaf = Leaf(gpu.uuid, gpu, None, f"{gpu.index}/?")
            out.append(SeatState(leaf, seats.by_device.get(gpu.uuid), tuple(by_leaf.pop(gpu.uuid))))
    return out
