"""The course store: one :class:`Store` per database, with one attribute per concern.

Open it with :func:`gpuseat.store.open_store` (``None`` = ``GPUSEAT_DB_URL`` or the SQLite file in the
gpuseat data dir, or any SQLAlchemy URL such as ``postgresql+psycopg://…``). The store owns one
:class:`~gpuseat.store.db.Database` (engine, SQLite writer queue, one session per call); each concern
(``store.courses``, ``store.roster``, ``store.seats`` …) is built on it when first used, lives in its
own module, and reaches another concern through the store (``self._store.events``). Every method is
one transaction and returns frozen views with ``to_dict()``. Commands that only read never create a
database.

Race-free by construction: a seat is handed out inside one transaction that locks it
(``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), and the database
itself refuses a second open assignment of one seat or one participant (partial unique indexes), so
even a buggy caller cannot double-assign. Every change is written to the append-only ``events`` log.

Courses are named by ``key``; ``course=None`` means "the only course" (an error when there are none
or several). Participants are found by key, email or Unix user name.

The flat method names of the old facade (``store.create_course(…)``) still work for now: each call
warns once (:class:`DeprecationWarning`) and forwards to its concern (``store.courses.create_course``).
"""

from __future__ import annotations

import warnings
from functools import cached_property
from typing import TYPE_CHECKING, Any, Self

from gpuseat.store.db import Database

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from gpuseat.store.accounts import Accounts
    from gpuseat.store.activity import Activity
    from gpuseat.store.agents import Agents
    from gpuseat.store.claiming import Claims
    from gpuseat.store.courses import Courses
    from gpuseat.store.delivery import Delivery
    from gpuseat.store.events import Events
    from gpuseat.store.lifecycle import Lifecycle
    from gpuseat.store.monitor import MonitorStore
    from gpuseat.store.requests import Requests
    from gpuseat.store.roster import Roster
    from gpuseat.store.seatfile import SeatFile
    from gpuseat.store.seats import Seats
    from gpuseat.store.survey import SurveyRows
    from gpuseat.store.tokens import Tokens

#: old flat method name → the concern that has it now (same name); ``store.seats(…)`` and
#: ``store.events(…)`` are kept by the concerns themselves (see ``Seats.__call__``)
MOVED: dict[str, str] = {
    **dict.fromkeys(
        (
            "course_file",
            "create_course",
            "create_course_from",
            "get_course",
            "list_courses",
            "set_plan_option",
            "set_survey_state",
        ),
        "courses",
    ),
    **dict.fromkeys(("find_participant", "import_roster", "participants"), "roster"),
    **dict.fromkeys(
        ("add_seats", "assign", "assign_all", "get_seat", "history", "move", "release", "seat_of", "set_seat_state"),
        "seats",
    ),
    **dict.fromkeys(("import_seat_file",), "seatfile"),
    **dict.fromkeys(("claim_seat", "warm_claims"), "claims"),
    **dict.fromkeys(
        (
            "find_token",
            "issue_tokens",
            "participant_for_token",
            "record_visits",
            "revoke_tokens",
            "rotate_tokens",
            "token_status",
        ),
        "tokens",
    ),
    **dict.fromkeys(("log",), "events"),
    **dict.fromkeys(("access_of", "readiness_of", "record_delivery", "record_readiness"), "delivery"),
    **dict.fromkeys(("archive_course", "delete_course", "export_course", "import_course", "remove_seats"), "lifecycle"),
    **dict.fromkeys(
        (
            "agent_statuses",
            "all_engine_settings",
            "changed_courses",
            "drop_lease",
            "engine_settings",
            "events_head",
            "forget_deletion",
            "holdings",
            "holds_lease",
            "leases",
            "listener",
            "log_any",
            "pending_deletions",
            "request_deletion",
            "save_agent_status",
            "set_engine_settings",
            "set_holdings",
            "take_lease",
        ),
        "agents",
    ),
    **dict.fromkeys(
        (
            "add_seat_hours",
            "agent_stop",
            "connected",
            "finish_request",
            "gpu_window",
            "idle_warning",
            "request_seat",
            "run_states",
            "seat_hours",
            "seat_policies",
            "seat_requests",
            "warn_idle",
        ),
        "requests",
    ),
}


class Store:
    """One course database and its concerns (see the module doc)."""

    def __init__(self, engine: Engine) -> None:
        self.database = Database(engine)

    @property
    def url(self) -> str:
        """The database URL, password included (to open the same store in a worker process)."""
        return self.database.url

    @property
    def in_memory(self) -> bool:
        """True for an in-memory SQLite store, which no other process can open."""
        return self.database.in_memory

    def close(self) -> None:
        """Release pooled connections (and the claims' own connections)."""
        self.database.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @cached_property
    def courses(self) -> Courses:
        """Courses: create, plan option, survey state, the course file."""
        from gpuseat.store.courses import Courses

        return Courses(self)

    @cached_property
    def roster(self) -> Roster:
        """The participants of a course."""
        from gpuseat.store.roster import Roster

        return Roster(self)

    @cached_property
    def seats(self) -> Seats:
        """Seats and assignments: add, state machine, assign, move, release, history."""
        from gpuseat.store.seats import Seats

        return Seats(self)

    @cached_property
    def seatfile(self) -> SeatFile:
        """The monitor's seats file, with the same rules and events as ``seats``."""
        from gpuseat.store.seatfile import SeatFile

        return SeatFile(self)

    @cached_property
    def claims(self) -> Claims:
        """A participant's seat taken in one statement, safe under any number of callers."""
        from gpuseat.store.claiming import Claims

        return Claims(self)

    @cached_property
    def tokens(self) -> Tokens:
        """Participants' access links."""
        from gpuseat.store.tokens import Tokens

        return Tokens(self)

    @cached_property
    def events(self) -> Events:
        """The append-only events log of a course."""
        from gpuseat.store.events import Events

        return Events(self)

    @cached_property
    def delivery(self) -> Delivery:
        """How participants reach their seats, and whether they can (readiness)."""
        from gpuseat.store.delivery import Delivery

        return Delivery(self)

    @cached_property
    def lifecycle(self) -> Lifecycle:
        """Undo: remove seats, archive or delete a course; export and import."""
        from gpuseat.store.lifecycle import Lifecycle

        return Lifecycle(self)

    @cached_property
    def agents(self) -> Agents:
        """Engine settings, agent leases and statuses, holdings, pending deletions."""
        from gpuseat.store.agents import Agents

        return Agents(self)

    @cached_property
    def requests(self) -> Requests:
        """Participants' start/stop requests, seat hours and session policies."""
        from gpuseat.store.requests import Requests

        return Requests(self)

    @cached_property
    def monitor(self) -> MonitorStore:
        """The monitor's samples, rollups and alerts (of all courses; ``of_course`` for one)."""
        from gpuseat.store.monitor import MonitorStore

        return MonitorStore(self)

    @cached_property
    def accounts(self) -> Accounts:
        """Organizer logins and the session signing key."""
        from gpuseat.store.accounts import Accounts

        return Accounts(self)

    @cached_property
    def activity(self) -> Activity:
        """Read-only views of the monitor's tables: live, daily, idle, open alerts."""
        from gpuseat.store.activity import Activity

        return Activity(self)

    @cached_property
    def survey(self) -> SurveyRows:
        """Survey templates and responses."""
        from gpuseat.store.survey import SurveyRows

        return SurveyRows(self)

    def __getattr__(self, name: str) -> Any:
        """The old facade's flat names (deprecated): one warning per call, then the concern's method."""
        concern = MOVED.get(name)
        if concern is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        warnings.warn(f"store.{name} is deprecated: use store.{concern}.{name}", DeprecationWarning, stacklevel=2)
        return getattr(getattr(self, concern), name)


#: the old name of :class:`Store` (``from gpuseat.store import CourseStore`` keeps working)
CourseStore = Store
