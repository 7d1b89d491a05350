"""What ``store.seats.move_from_host`` answers and refuses: a server dies after day one, and everyone on it moves.

Each holder of a seat on the host gets the best suitable free seat on another host (or on ``to_host``), chosen by
the rule ``seats assign`` uses (:func:`gpuseat.store.seats.choose_seats`); each move is a ``seats move`` (the old
assignment closed with ``ended_by="move"``, a ``seat.move`` events row, which the agents treat as revoking), all in
one transaction. The host's seats keep their state: the organizer removes them once the server is gone for good.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuseat.errors import InputError, NoFreeSeat
from gpuseat.store.views import _View

if TYPE_CHECKING:
    from gpuseat.db.models import CourseRecord, Participant, Seat


@dataclass(frozen=True, slots=True)
class HostMove(_View):
    """One holder moved off a host: from which seat (and host) to which."""

    participant: str
    from_seat: str
    from_host: str
    seat: str
    host: str | None


@dataclass(frozen=True, slots=True)
class HostMoveReport(_View):
    """What ``store.seats.move_from_host`` did (or, with ``dry_run``, would do): the moves in the order they were
    chosen, the holders who stayed on the host (``partial``), and whether anything was stored."""

    course: str
    from_host: str
    to_host: str | None
    moved: tuple[HostMove, ...]
    stayed: tuple[str, ...]
    dry_run: bool


def check_hosts(crow: CourseRecord, seats: list[Seat], host: str, to_host: str | None) -> None:
    """An unknown host (either flag), or the same host twice: one input error naming the course's hosts."""
    hosts = sorted({x.host for x in seats if x.host})
    for field, name in (("from_host", host), ("to_host", to_host)):
        if name is not None and name not in hosts:
            raise InputError(
                f"no seat of course {crow.key} is on host {name!r} (hosts: {', '.join(hosts) or 'none'})",
                where=field,
                fix="name a host of the course's seats (gpuseat seats export --format csv lists them)",
            )
    if to_host == host:
        raise InputError(
            f"it is the host the seats move off ({host})",
            where="to_host",
            fix="name another host, or leave --to-host out (any other host)",
        )


def too_few_seats(
    crow: CourseRecord, host: str, to_host: str | None, holders: int, fits: int, left: list[Participant]
) -> NoFreeSeat:
    """Too few suitable free seats elsewhere: how many are short, for which groups, and what to do."""
    per_group = Counter(p.group_name for p in left)
    needs = "; ".join(
        f"{'group ' + g if g else 'those without a group'} need{'s' if g else ''} {n} more"
        for g, n in sorted(per_group.items(), key=lambda item: item[0] or "")
    )
    where = f"on {to_host}" if to_host else "elsewhere"
    return NoFreeSeat(
        f"{holders} holder(s) on {host} but {fits} suitable free seat(s) {where} ({needs})",
        where=f"course {crow.key}",
        fix="add seats (gpuseat seats add ... --host) or use --partial to move who fits; nothing was moved",
    )
