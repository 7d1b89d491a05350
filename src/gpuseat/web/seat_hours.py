"""The organizer's seat hours (issue 40): hours per participant (quota, top-ups, used, left, when the seat
stops at this rate) and the course's ``[policy]``, as a page (``/hours``) and a CSV download (``/hours.csv``).
Served by :mod:`gpuseat.web.routes.organizer`."""

from __future__ import annotations

from typing import Any

from gpuseat.errors import GpuseatError

SEAT_HOURS_CSV_COLUMNS = (
    "participant",
    "group",
    "seat",
    "quota",
    "topups",
    "used",
    "left",
    "gpu_busy",
    "running",
    "runs_out_at",
)


def hour_rows(portal: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per participant, and the course's own policy (``{}`` without a course file)."""
    key = portal.course_key
    people = {p.key: p for p in portal.store.roster.participants(key)}
    hours = portal.store.requests.seat_hours(key)
    busy = _gpu_busy(portal, key)
    rows = [
        {
            "participant": k,
            "group": people[k].group,
            "seat": people[k].seat,
            **h.to_dict(),
            "gpu_busy": round(busy.get(people[k].seat or "", 0.0), 3),
        }
        for k, h in sorted(hours.items())
        if k in people
    ]
    try:
        policy = portal.store.courses.course_file(key).policy.model_dump()
    except GpuseatError:  # a course without a file has no policy
        policy = {}
    return rows, policy


def _gpu_busy(portal: Any, course: str) -> dict[str, float]:
    """Hours each seat's GPU was in use, from the monitor's one-minute rollups (0 without a monitor)."""
    ids = {s.id: s.key for s in portal.store.seats.seats(course)}
    out: dict[str, float] = {}
    for day in portal.store.activity.daily(seat_ids=list(ids)):
        out[ids[day.seat_id]] = out.get(ids[day.seat_id], 0.0) + day.active_hours
    return out
