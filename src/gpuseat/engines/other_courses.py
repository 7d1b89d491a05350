"""Other courses on the same GPU, for the engines whose seats name their device by UUID (JupyterHub, Slurm,
Kubernetes): the host engine's rule (:mod:`gpuseat.engines.host.others`) with one device per UUID.

Device UUIDs are unique per course only: a course left unarchived (24/7: it never closes by date) and a later one
may each give a holder the same GPU. Of two held seats of one engine on one device UUID in two courses that are not
archived, the older assignment keeps it; the newer holder gets no access and the pass fails that seat's
``seat.device`` step with :func:`~gpuseat.engines.host.others.refusal`'s words and fix.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gpuseat.engines.host import others

if TYPE_CHECKING:
    from gpuseat.store import CourseStore, SeatView


def yielded(store: CourseStore, course: str, engine: str, seats: Iterable[SeatView]) -> dict[str, others.Holder]:
    """Seat of ``course`` (held, with a device UUID) → the older holding of another course on its GPU (one read).
    ``seats`` count as held by ``engine`` whatever their stored engine (a hub seat's first start sets it)."""
    mine = [s for s in seats if s.device_uuid and s.participant]
    rows = store.seats.held_on_devices({s.device_uuid or "" for s in mine}, engine) if mine else []
    theirs = [r for r in rows if r["course"] != course]
    if not theirs:
        return {}  # the usual server: one course
    held = others.with_files(theirs, lambda uuid: ((uuid,), (uuid,)))
    for s in mine:
        since = s.assigned_since or datetime.max.replace(tzinfo=UTC)
        device = (s.device_uuid or "",)
        held.append(others.Holder((since, course, s.key), s.participant or "", "", device, device))
    return others.shared(course, held)[0]
