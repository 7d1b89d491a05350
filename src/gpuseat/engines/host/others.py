"""Other courses on the same GPU server: never two people on one GPU, and no fight between the courses' passes.

Device UUIDs are unique per course only, so two courses that are not archived may both seat someone on one
GPU (a January course left open, then a February one on the same server; a 24/7 course never closes by date).
Each course's pass reads every held seat on this machine's devices, by UUID whatever host name the seats give and
whichever engine delivers them (:data:`LOCAL`: an SSH seat of one course and a JupyterHub server or a passed-through
VM of another are two people on one GPU just the same; ``store.seats.held_on_devices``), and applies the same rule,
so the passes agree:

- Two holdings *clash* when one's own device files (a whole GPU's ``/dev/nvidiaN``, a MIG instance's
  capability files) are among the other's files (its own and a MIG slice's parent GPU). Two MIG slices of one
  GPU do not clash: they share only the parent.
- Of two clashing holdings of different courses, the older one (its assignment's start; then course and seat
  key) keeps the device. The newer holder is granted nothing on this host: the pass fails that seat's
  ``seat.device`` step with the other course, its seat and holder, and the fix (archive that course, or
  release the seat there).
- A device file keeps the other courses' remaining holders in its ACL: a course's revoke takes away only what
  no course gives (before, each course's pass took the other course's holder off the file and the next pass of
  that course put them back).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuseat.core.delivery import login_name

#: the engines that deliver a GPU of the server they run on, named by its device UUID: their held seats are compared
#: with each other whatever engine each course's seats use (Slurm and Kubernetes give out their nodes' GPUs
#: themselves: their own rules, :func:`gpuseat.engines.other_courses.yielded_by_files` and the device plugin)
LOCAL = ("host", "jupyterhub", "libvirt")


@dataclass(frozen=True, slots=True)
class Holder:
    """One held host seat of some course on this host, with its device files (``own``; ``files``: all)."""

    order: tuple[datetime, str, str]  # (since, course, seat): the older holding keeps the device
    participant: str
    login: str
    own: tuple[str, ...]
    files: tuple[str, ...]

    @property
    def since(self) -> datetime:
        return self.order[0]

    @property
    def course(self) -> str:
        return self.order[1]

    @property
    def seat(self) -> str:
        return self.order[2]


def with_files(
    rows: Iterable[dict[str, Any]], files_of: Callable[[str], tuple[tuple[str, ...], tuple[str, ...]] | None]
) -> list[Holder]:
    """``store.seats.held_on_devices`` rows with their device files (``files_of(uuid)``: (own, all), None when the
    device is not on this host); rows without a device are left out."""
    out = []
    for r in rows:
        found = files_of(r["device_uuid"]) if r["device_uuid"] else None
        if found is not None:
            login = login_name(r["participant"], r["unix_user"])
            out.append(Holder((r["since"], r["course"], r["seat"]), r["participant"], login, *found))
    return out


def clashing(course: str, found: tuple[tuple[str, ...], tuple[str, ...]] | None, held: list[Holder]) -> bool:
    """Whether a device with files ``found`` ((own, all), as ``with_files`` takes them) clashes with a holding of
    another course than ``course``: such a device is not free for a seat that has no device UUID yet."""
    if found is None:
        return False
    own, files = found
    return any(h.course != course and (set(own) & set(h.files) or set(h.own) & set(files)) for h in held)


def beaten(held: list[Holder]) -> dict[tuple[str, str], Holder]:
    """(course, seat) → the older holding of another course it clashes with (see the module docstring)."""
    users: dict[str, list[Holder]] = {}
    for h in held:
        for f in h.files:
            users.setdefault(f, []).append(h)
    out: dict[tuple[str, str], Holder] = {}
    for f, hs in users.items():
        for owner in (h for h in hs if f in h.own):
            for other in hs:
                if other.course == owner.course:
                    continue
                first, later = sorted((owner, other), key=lambda h: h.order)
                known = out.get((later.course, later.seat))
                if known is None or first.order < known.order:
                    out[(later.course, later.seat)] = first
    return out


def shared(course: str, held: list[Holder]) -> tuple[dict[str, Holder], dict[str, set[str]]]:
    """(seat of ``course`` → the other course's holding that keeps its device; device file → the logins of
    other courses' holders that keep it)."""
    lost = beaten(held)
    yielded = {seat: h for (c, seat), h in lost.items() if c == course}
    keep: dict[str, set[str]] = {}
    for h in held:
        if h.course != course and (h.course, h.seat) not in lost:
            for f in h.files:
                keep.setdefault(f, set()).add(h.login)
    return yielded, keep


def by_uuid(course: str, rows: Iterable[dict[str, Any]]) -> dict[str, Holder]:
    """Seat of ``course`` → the other course's older holding on the same device UUID, from
    ``store.seats.held_on_devices`` rows: what the organizer's views can tell away from the server (a whole GPU
    over a slice of it is a clash only the server's device files show: ``seats check`` and ``apply`` say it)."""
    held = [Holder((r["since"], r["course"], r["seat"]), r["participant"], "", (u,), (u,)) for r in rows
            if (u := r["device_uuid"])]  # fmt: skip
    return {seat: h for (c, seat), h in beaten(held).items() if c == course}


def refusal(seat: str, holder: str, other: Holder) -> tuple[str, str]:
    """The failed step's message and fix for ``seat`` (held by ``holder``), whose device ``other`` keeps."""
    what = (
        f"seat {seat}: course {other.course} is not archived and its seat {other.seat} (held by {other.participant} "
        f"since {other.since:%Y-%m-%d %H:%M} UTC) is on the same device: {holder} gets no access here until it is "
        "free (two people never share a GPU)"
    )
    fix = (
        f"end course {other.course} (gpuseat course archive {other.course}) or release its seat there "
        f"(gpuseat seats release --course {other.course} --seat {other.seat}), then apply again"
    )
    return what, fix
