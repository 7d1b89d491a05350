"""Courses, roster, seats, assignments and access links: the course store, as the service layer names it.

The store itself (every query and write) lives in :mod:`gpuseat.store`; this module re-exports it so
``from gpuseat.services.courses import CourseStore, open_store`` keeps working, and holds the one
service that joins the store with the planner (:func:`plan_option_for`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuseat.errors import InputError
from gpuseat.store import (
    DEFAULT_ACTOR,
    AssignmentView,
    AssignReport,
    CourseStore,
    CourseView,
    EventView,
    IssuedToken,
    ParticipantView,
    RosterChange,
    RosterReport,
    SeatSpec,
    SeatView,
    open_store,
    token_hash,
)

if TYPE_CHECKING:
    from gpuseat.catalog.bundle import Catalog

__all__ = [
    "DEFAULT_ACTOR",
    "AssignReport",
    "AssignmentView",
    "CourseStore",
    "CourseView",
    "EventView",
    "IssuedToken",
    "ParticipantView",
    "RosterChange",
    "RosterReport",
    "SeatSpec",
    "SeatView",
    "open_store",
    "plan_option_for",
    "token_hash",
]


def plan_option_for(path: Path, rank: int, catalog: Catalog) -> dict[str, Any]:
    """Option ``rank`` (1 = cheapest) of ``gpuseat plan`` on a course file, as its JSON (to store with the course)."""
    from gpuseat.services.planning import plan_course

    if not 1 <= rank <= 1000:
        raise InputError(f"--plan-option {rank}", where="plan_option", fix="give a rank from 1 (the cheapest)")
    options = plan_course(path, catalog).to_dict()["options"]
    if rank > len(options):
        raise InputError(
            f"the plan has {len(options)} option(s), not {rank}",
            where="plan_option",
            fix=f"choose 1 to {len(options)} (gpuseat plan {path} lists them)",
        )
    return dict(options[rank - 1])
