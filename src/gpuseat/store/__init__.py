"""The course store: the one package that owns every query and every write of the course database.

Only ``gpuseat.store`` and ``gpuseat.db`` (models, migrations, connection) speak SQL; services, the
CLI, the portal, the monitor and the hub hooks call the :class:`Store` here (opened once with
:func:`open_store`), through one attribute per concern (``store.courses``, ``store.seats`` …); each
method is one transaction and returns the frozen views below. ``CourseStore`` is the store's old name.
"""

from __future__ import annotations

from gpuseat.core.roster import RosterText
from gpuseat.store.facade import CourseStore, Store
from gpuseat.store.opening import open_monitor, open_store
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
    "Store",
    "open_monitor",
    "open_store",
    "token_hash",
]
