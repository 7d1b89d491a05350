"""What the participant's seat controls (issue 40) show on their page ``/t/<token>``: the seat's run
state, their seat hours, an idle warning and their latest requests.

Each button writes a request row (:meth:`~gpuseat.store.requests.RequestMethods.request_seat`, from
:mod:`gpuseat.web.routes.participant`); the seat's agent carries it out and the page shows it pending,
then done or failed with the reason.
"""

from __future__ import annotations

from typing import Any

from gpuseat.errors import InputError
from gpuseat.store import ParticipantView, SeatView

RESET_SAYS: dict[str, str] = {
    "host": "Reset to a fresh home: every file in your home is deleted.",
    "libvirt": "Reset to a fresh disk: your virtual machine starts again from the course's image; its files are lost.",
    "jupyterhub": "Reset restarts your notebook server: your running kernels end (your files stay).",
}
"""What *Reset* does on each engine, said beside its confirmation box (the engines' requests carry it out)."""


def seat_controls(portal: Any, who: ParticipantView, seat: SeatView | None) -> dict[str, Any]:
    """What the page's controls show for ``who`` holding ``seat`` (read once by the caller, for the whole page):
    the seat's run state, hours, and the latest requests."""
    store = portal.store
    out: dict[str, Any] = {"requests": [], "hours": None, "running": True, "stopped_reason": None, "enabled": False}
    out["idle_warning"] = None
    try:
        hours = store.requests.seat_hours(who.course, participant=who.key).get(who.key)
        out["hours"] = hours.to_dict() if hours is not None else None
        if seat is None:  # requests, idle warnings and run states are a seat's: a seatless page skips them
            return out
        out["requests"] = [r.to_dict() for r in store.requests.seat_requests(who.course, participant=who.key, limit=5)]
        warned = store.requests.idle_warning(who.course, who.key)
        out["idle_warning"] = warned[1] if warned is not None else None
        state = store.requests.run_states(who.course).get(who.key)
        if state is not None:
            out["running"], out["stopped_reason"] = state.running, state.reason
    except InputError:
        return out
    from gpuseat.store.requests import SELF_SERVICE_ENGINES

    out["enabled"] = seat is not None and seat.engine in SELF_SERVICE_ENGINES
    out["reset_says"] = RESET_SAYS.get(seat.engine, "Reset your seat: what you changed on it is lost.")
    return out
