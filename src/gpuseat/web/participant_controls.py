"""What the participant's seat controls (issue 40) show on their page ``/t/<token>``: the seat's run
state, their seat hours, an idle warning and their latest requests.

Each button writes a request row (:meth:`~gpuseat.store.requests.RequestMethods.request_seat`, from
:mod:`gpuseat.web.routes.participant`); the seat's agent carries it out and the page shows it pending,
then done or failed with the reason.
"""

from __future__ import annotations

from typing import Any

from gpuseat.engines.hours import stopped_for_hours
from gpuseat.store.requests import SELF_SERVICE_ENGINES, PageReading

RESET_SAYS: dict[str, str] = {
    "host": "Reset to a fresh home: every file in your home is deleted.",
    "libvirt": "Reset to a fresh disk: your virtual machine starts again from the course's image; its files are lost.",
    "jupyterhub": "Reset restarts your notebook server: your running kernels end (your files stay).",
    "skypilot": "Reset gives you a fresh cloud machine: the old one and everything on its disk are deleted.",
    "kubernetes": "Reset gives you a fresh namespace: everything in yours is deleted, your volumes (PVCs) and "
    "their data too.",
    "slurm": "A Slurm seat has nothing of its own to reset (your files are in your cluster home): a reset is "
    "refused; Restart cancels your jobs.",
}
"""What *Reset* does on each engine, said beside its confirmation box (the engines' requests carry it out)."""

RESTART_SAYS: dict[str, str] = {
    "host": "Restart (ends your processes)",
    "libvirt": "Restart (reboots your virtual machine)",
    "jupyterhub": "Restart (restarts your notebook server)",
    "skypilot": "Restart (stops and starts your cloud machine)",
    "kubernetes": "Restart (ends your pods; your access stays)",
    "slurm": "Restart (cancels your jobs; you can submit again)",
}
"""The *Restart* button's words on each engine."""


def seat_controls(reading: PageReading) -> dict[str, Any]:
    """What the page's controls show, from the page's one read (:meth:`~gpuseat.store.requests.RequestMethods.page_of`):
    the seat's run state, hours, and the latest requests (a seatless page shows hours only)."""
    seat = reading.seat
    out: dict[str, Any] = {"requests": [], "hours": None, "running": True, "stopped_reason": None, "enabled": False}
    out["idle_warning"], out["hours_back"], out["closed"] = None, False, None
    out["hours"] = reading.hours.to_dict() if reading.hours is not None else None
    if seat is None:
        return out
    out["requests"] = [r.to_dict() for r in reading.requests]
    out["closed"] = reading.closed  # the engines lock the seat then: the page says so beside its way in
    out["idle_warning"] = reading.idle_warning[1] if reading.idle_warning is not None else None
    if reading.run_state is not None:
        # "Your seat is stopped: …": the engines' reasons that begin with the same word say it once
        reason = reading.run_state.reason
        out["running"], out["stopped_reason"] = reading.run_state.running, reason and reason.removeprefix("stopped: ")
        # stopped for hours, and a top-up (or a new quota) since gave hours back: the stop stays until a start
        h = reading.hours
        out["hours_back"] = (
            not reading.run_state.running
            and stopped_for_hours(reason)
            and h is not None
            and (h.left is None or h.left > 0)
        )
    out["enabled"] = seat.engine in SELF_SERVICE_ENGINES
    out["reset_says"] = RESET_SAYS.get(seat.engine, "Reset your seat: what you changed on it is lost.")
    out["restart_says"] = RESTART_SAYS.get(seat.engine, "Restart")
    return out
