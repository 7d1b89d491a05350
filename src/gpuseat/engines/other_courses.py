"""Other courses on the same GPU, for the engines other than the host engine: its rule
(:mod:`gpuseat.engines.host.others`), with one device per UUID (JupyterHub: :func:`yielded`) or the device files a
seat's engine reference names (Slurm's GRES devices: :func:`yielded_by_files`).

Device UUIDs are unique per course only: a course left unarchived (24/7: it never closes by date) and a later one
may each give a holder the same GPU, through the same engine or two (an SSH seat of the host engine in one, a hub
server in the other). Of two held seats of the engines that deliver a GPU of their server
(:data:`~gpuseat.engines.host.others.LOCAL`) on one device UUID in two courses that are not archived, the older
assignment keeps it; the newer holder gets no access and the pass fails that seat's
``seat.device`` step with :func:`~gpuseat.engines.host.others.refusal`'s words and fix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gpuseat.engines.host import others

if TYPE_CHECKING:
    from gpuseat.store import CourseStore, SeatView


def yielded(store: CourseStore, course: str, seats: Iterable[SeatView]) -> dict[str, others.Holder]:
    """Seat of ``course`` (held, with a device UUID) → the older holding of another course on its GPU, whichever
    of the :data:`~gpuseat.engines.host.others.LOCAL` engines delivers it (one read). ``seats`` count as held
    whatever their stored engine (a hub seat's first start sets it)."""
    mine = [s for s in seats if s.device_uuid and s.participant]
    rows = store.seats.held_on_devices({s.device_uuid or "" for s in mine}, others.LOCAL) if mine else []
    theirs = [r for r in rows if r["course"] != course]
    if not theirs:
        return {}  # the usual server: one course
    held = others.with_files(theirs, lambda uuid: ((uuid,), (uuid,)))
    for s in mine:
        since = s.assigned_since or datetime.max.replace(tzinfo=UTC)
        device = (s.device_uuid or "",)
        held.append(others.Holder((since, course, s.key), s.participant or "", "", device, device))
    return others.shared(course, held)[0]


def yielded_by_files(
    store: CourseStore,
    course: str,
    engine: str,
    mine: list[others.Holder],
    files_of: Callable[[str, str | None], tuple[tuple[str, ...], tuple[str, ...]] | None],
) -> dict[str, others.Holder]:
    """:func:`yielded` for ``mine`` (this course's held seats with their files), the other courses' held seats of
    ``engine`` given their files by ``files_of(seat, engine_ref)`` ((own, all); None: no device recorded)."""
    held = list(mine)
    for r in store.seats.held_by_engine(engine) if mine else ():
        found = files_of(r["seat"], r["engine_ref"]) if r["course"] != course else None
        if found is not None:
            held.append(others.Holder((r["since"], r["course"], r["seat"]), r["participant"], "", *found))
    return others.shared(course, held)[0] if len(held) > len(mine) else {}
