"""The course store: the one package that owns every query and every write of the course database.

Only ``gpuseat.store`` and ``gpuseat.db`` (models, migrations, connection) speak SQL; services, the
CLI, the portal, the monitor and the hub hooks call the :class:`Store` here (opened once with
:func:`open_store`), through one attribute per concern (``store.courses``, ``store.seats`` …); each
method is one transaction and returns the frozen views below. ``CourseStore`` is the store's old name.

The names below load on first use (a module ``__getattr__``): ``from gpuseat.store import open_store``
imports the opening and the facade only, not every concern, the seat specs' Pydantic models or the
roster parser, so a command that reads seats starts without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuseat import lazy_getattr

if TYPE_CHECKING:
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

#: each re-exported name → the module that defines it
_HOMES = {
    "DEFAULT_ACTOR": "gpuseat.store.rows",
    "AssignReport": "gpuseat.store.views",
    "AssignmentView": "gpuseat.store.views",
    "CourseStore": "gpuseat.store.facade",
    "CourseView": "gpuseat.store.views",
    "EventView": "gpuseat.store.views",
    "IssuedToken": "gpuseat.store.views",
    "ParticipantView": "gpuseat.store.views",
    "RosterChange": "gpuseat.store.views",
    "RosterReport": "gpuseat.store.views",
    "RosterText": "gpuseat.core.roster",
    "SeatSpec": "gpuseat.store.specs",
    "SeatView": "gpuseat.store.views",
    "Store": "gpuseat.store.facade",
    "open_monitor": "gpuseat.store.opening",
    "open_store": "gpuseat.store.opening",
    "token_hash": "gpuseat.store.tokens",
}

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


__getattr__ = lazy_getattr(globals(), _HOMES)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
