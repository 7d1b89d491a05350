"""The course store facade: one object for courses, roster, seats, claims, tokens and the events log.

Open it with :func:`gpuseat.store.open_store` (``None`` = ``GPUSEAT_DB_URL`` or the SQLite file in the
gpuseat data dir, or any SQLAlchemy URL such as ``postgresql+psycopg://…``) and call its methods;
every method is one transaction and returns frozen views with ``to_dict()``. Commands that only read
never create a database.

Race-free by construction: a seat is handed out inside one transaction that locks it
(``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), and the database
itself refuses a second open assignment of one seat or one participant (partial unique indexes), so
even a buggy caller cannot double-assign. Every change is written to the append-only ``events`` log.

Courses are named by ``key``; ``course=None`` means "the only course" (an error when there are none
or several). Participants are found by key, email or Unix user name.

The methods live in one module per concern (``courses``, ``roster``, ``seats``, ``seatfile``,
``claims``, ``tokens``, ``events``, ``delivery``); they share the sessions of :class:`~gpuseat.store.base.StoreBase`.
"""

from __future__ import annotations

from gpuseat.store.agents import AgentMethods
from gpuseat.store.claiming import ClaimMethods
from gpuseat.store.courses import CourseMethods
from gpuseat.store.delivery import DeliveryMethods
from gpuseat.store.events import EventMethods
from gpuseat.store.lifecycle import LifecycleMethods
from gpuseat.store.requests import RequestMethods
from gpuseat.store.roster import RosterMethods
from gpuseat.store.seatfile import SeatFileMethods
from gpuseat.store.tokens import TokenMethods


class CourseStore(
    CourseMethods,
    RosterMethods,
    SeatFileMethods,
    ClaimMethods,
    TokenMethods,
    EventMethods,
    DeliveryMethods,
    LifecycleMethods,
    AgentMethods,
    RequestMethods,
):
    """Courses, roster, seats, assignments, tokens and events in one database (see the module doc)."""
