"""The course store: the one package that owns every query and every write of the course database.

Only ``gpuseat.store`` and ``gpuseat.db`` (models, migrations, connection) speak SQL; services, the
CLI, the portal, the monitor and the hub hooks call the facade here. :class:`CourseStore` (opened
with :func:`open_store`) is the facade; its methods are one transaction each and return the frozen
views below.
"""

from __future__ import annotations

from gpuseat.core.roster import RosterText
from gpuseat.store.facade import CourseStore
from gpuseat.store.opening import open_store
from gpuseat.store.rows import DEFAULT_ACTOR
from gpuseat.store.specs import SeatSpec
from gpuseat.store.tokens import token_hash
from gpuseat.store.views import (
    AssignmentView,
    AssignReport,
    CourseView,
    EventView,
    IssuedToken,
    ParticipantView,
    RosterChange,
    RosterReport,
    SeatView,
)

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
    "RosterText",
    "SeatSpec",
    "SeatView",
    "open_store",
    "token_hash",
]
