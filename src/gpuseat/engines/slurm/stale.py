"""The course's session reservations that its schedule no longer has (a session moved, shortened to nothing or
cancelled), and the helpers the Slurm engine's plan uses to make new ones beside them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from gpuseat.engines.slurm import reading
from gpuseat.engines.slurm.adapter import Job
from gpuseat.engines.slurm.config import PLACEHOLDER_USER, Reservation


def stale_sessions(
    partition: str,
    resvs: dict[str, dict[str, str]],
    sessions: dict[str, Reservation],
    jobs: Sequence[Job],
    ending: set[int],
    notes: list[str],
    *,
    open_course: bool,
) -> tuple[list[str], dict[str, list[int]]]:
    """The course's session reservations that no session still to come names (its schedule changed): those
    to delete, and those kept while a live job (not one being cancelled) is in them, which Slurm refuses to
    delete ("Requested reservation is in use"), with a note each (the plan lets nobody into those:
    :func:`closed_why`). Only while the course is open (active, with holders), whether or not a session is
    still to come (its last one cancelled or moved into the past: every reservation is stale); a course not
    open has every reservation deleted by the plan itself. Only ones in the course partition: gpuseat made them."""
    if not open_course:
        return [], {}
    stale = sorted(n for n, f in resvs.items() if n not in sessions and f.get("PartitionName") == partition)
    held_up = {n: ids for n in stale if (ids := [j.job_id for j in jobs if j.live and j.reservation == n and
                                                  j.job_id not in ending])}  # fmt: skip
    for name, ids in held_up.items():
        notes.append(
            f"session {name} is no longer in the course's schedule, but job(s) {', '.join(map(str, ids[:5]))} "
            "are in it, so it stays, open to no new job (Slurm deletes no reservation in use; the jobs are their "
            "owners'): the first apply after they end deletes it"
        )
    return [n for n in stale if n not in held_up], held_up


def closed_why(job_ids: Sequence[int]) -> str:
    """Why a session reservation kept for the jobs in it (:func:`stale_sessions`) admits nobody now."""
    return (
        f"the course's schedule has no such session now: no new job in it (Users={PLACEHOLDER_USER}); deleted once "
        f"job(s) {', '.join(map(str, job_ids[:5]))} end"
    )


def starts_later(fields: dict[str, str]) -> bool:
    """Whether a reservation (``scontrol show`` fields) starts after now, on the controller's clock."""
    try:
        return datetime.fromisoformat(fields.get("StartTime", "")) > datetime.now()
    except ValueError:
        return False


def kept_overlapping(res: Reservation, kept: dict[str, list[int]], resvs: dict[str, dict[str, str]]) -> str | None:
    """A kept reservation (``kept``) whose time overlaps the session ``res``: its cores are taken then, so a
    reservation made now would be given other cores than its seats are bound to."""
    return next((name for name in kept if reading.overlaps(res, resvs[name])), None)


def replace_start(res: Reservation, start: datetime, users: Sequence[str]) -> Reservation:
    """The session ``res`` made from ``start`` (a session under way: now) for ``users``."""
    return replace(res, start=start, users=tuple(users))
