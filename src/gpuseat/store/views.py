"""What the course store returns: frozen views with one ``to_dict()`` each (the ``--format json`` shape)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime
from typing import Any


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, _View):
        return value.to_dict()
    return value


class _View:
    """One ``to_dict()`` per result: JSON-ready (ISO times, lists), the shape of ``--format json``."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain JSON values."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


def _utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every time leaving the store is aware UTC."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _stored_time(value: datetime | str | None) -> datetime | None:
    """A stored time read without the ORM: SQLite's DB-API rows hold text, read as SQLAlchemy 2's SQLite
    ``DateTime`` reads it (``datetime.fromisoformat``); other drivers already give datetimes."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


@dataclass(frozen=True, slots=True)
class CourseView(_View):
    """A course as stored: its file's summary (groups with needs), dates, counts."""

    key: str
    name: str
    timezone: str
    starts_on: date | None
    ends_on: date | None
    summary: dict[str, Any]
    plan_option: dict[str, Any] | None
    survey_state: str | None
    participants: int
    seats: int
    assigned: int
    created_at: datetime
    updated_at: datetime

    @property
    def groups(self) -> tuple[str, ...]:
        """The course's group names, in file order."""
        return tuple(g["name"] for g in self.summary.get("groups", ()))


@dataclass(frozen=True, slots=True)
class ParticipantView(_View):
    """A participant, with the key of the seat they hold now (None when they have none)."""

    course: str
    key: str
    name: str | None
    email: str | None
    group: str | None
    unix_user: str | None
    ssh_key: str | None
    seat: str | None
    created_at: datetime | None
    updated_at: datetime | None
    id: int = 0  # the database id (what the monitor's tables use)


#: the stored seat columns a :class:`SeatView` is made of, in the order :meth:`SeatView.from_row` reads them
#: (the claim's SQL and ``seats status``' plain SQL select these, no more: every column returned costs the
#: client decoding time on the hottest path)
SEAT_COLUMNS = (
    "id",
    "key",
    "kind",
    "host",
    "device_uuid",
    "profile",
    "memory_gb",
    "groups",
    "engine",
    "engine_ref",
    "state",
    "state_reason",
    "state_at",
    "connect",
)


@dataclass(frozen=True, slots=True)
class SeatView(_View):
    """A seat, its engine state and who holds it now."""

    course: str
    key: str
    kind: str
    host: str | None
    device_uuid: str | None
    profile: str | None
    memory_gb: float | None
    groups: tuple[str, ...]
    engine: str
    engine_ref: str | None
    state: str
    state_reason: str | None
    state_at: datetime | None
    connect: str | None
    participant: str | None
    assigned_since: datetime | None
    mode: str | None
    id: int = 0  # the database id (what the monitor's tables and store.activity use)

    @classmethod
    def from_row(
        cls,
        course: str,
        row: Sequence[Any],
        participant: str | None = None,
        since: datetime | str | None = None,
        mode: str | None = None,
    ) -> SeatView:
        """The one mapping of a stored seat to its view, whoever read it: the ORM's object (its attributes
        in :data:`SEAT_COLUMNS` order), the claim's SQL or ``seats status``' plain SQL (SQLite's text for
        the groups and times is decoded here). ``participant``, ``since``, ``mode``: its open assignment."""
        sid, key, kind, host, device_uuid, profile, memory_gb, groups, engine, engine_ref = row[:10]
        state, state_reason, state_at, connect = row[10:]
        if isinstance(groups, str):  # SQLite's JSON text, read without the ORM
            groups = () if groups == "[]" else json.loads(groups)
        return cls(
            course=course,
            key=key,
            kind=kind,
            host=host,
            device_uuid=device_uuid,
            profile=profile,
            memory_gb=memory_gb,
            groups=tuple(groups or ()),
            engine=engine,
            engine_ref=engine_ref,
            state=state,
            state_reason=state_reason,
            state_at=_utc(_stored_time(state_at)),
            connect=connect,
            participant=participant,
            assigned_since=_utc(_stored_time(since)),
            mode=mode,
            id=sid,
        )


@dataclass(frozen=True, slots=True)
class AssignmentView(_View):
    """One assignment (open when ``valid_to`` is None); ``ended_by`` says why it closed."""

    course: str
    seat: str
    participant: str
    mode: str
    valid_from: datetime
    valid_to: datetime | None
    ended_by: str | None


@dataclass(frozen=True, slots=True)
class RosterChange(_View):
    """What a roster import did to one participant: ``added``, ``updated`` (with fields) or ``unchanged``."""

    key: str
    email: str
    action: str
    fields: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RosterReport(_View):
    """The result of a roster import; ``absent`` are stored participants the file no longer lists (kept);
    ``own_keys`` those whose key set since by a key request was kept (the file has the one it replaced, or none)."""

    course: str
    added: int
    updated: int
    unchanged: int
    changes: tuple[RosterChange, ...]
    absent: tuple[str, ...]
    own_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AssignReport(_View):
    """The result of ``store.seats.assign_all``: new assignments, how many were kept, who is left out."""

    course: str
    assigned: tuple[AssignmentView, ...]
    kept: int
    unassigned: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IssuedToken(_View):
    """A freshly issued access token: shown once, only its hash is stored."""

    course: str
    participant: str
    token: str
    created_at: datetime

    def link(self, base_url: str) -> str:
        """The participant's access link under ``base_url`` (``…/t/TOKEN``)."""
        return f"{base_url.rstrip('/')}/t/{self.token}"


@dataclass(frozen=True, slots=True)
class EventView(_View):
    """One line of the append-only log."""

    id: int
    at: datetime
    course: str | None
    actor: str
    action: str
    participant: str | None
    seat: str | None
    detail: dict[str, Any] | None
