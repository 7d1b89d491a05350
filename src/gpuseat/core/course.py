"""The course file: who needs seats, with what, and when.

A course has groups of participants (each with a :class:`SeatNeed`), a schedule (24/7 for a number of
days, or lab sessions) and cost options. Parsing is strict: unknown keys, zero counts and dates out of
order are input errors that name the field.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import date, datetime, time, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpuseat.core.needs import SeatNeed

Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[str, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_HOURS = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-4]):([0-5]\d)$")


def parse_hours(text: str) -> tuple[time, float]:
    """``"09:00-17:00"`` → (start time, length in hours); the end must come after the start."""
    m = _HOURS.match(text)
    if not m:
        raise ValueError(f"hours must look like 09:00-17:00, got {text!r}")
    h1, m1, h2, m2 = (int(g) for g in m.groups())
    start, end = h1 * 60 + m1, h2 * 60 + m2
    if end > 24 * 60 or end <= start:
        raise ValueError(f"hours {text!r}: the end must come after the start, on the same day")
    return time(h1, m1), (end - start) / 60


class Session(BaseModel):
    """One lab session on one date."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    date: date
    hours: str

    @field_validator("hours")
    @classmethod
    def _hours(cls, v: str) -> str:
        parse_hours(v)
        return v

    @property
    def length_h(self) -> float:
        """Session length in hours."""
        return parse_hours(self.hours)[1]


class Schedule(BaseModel):
    """When seats are in use: 24/7 from ``start`` for ``days`` (or to ``end``), or lab sessions.

    Lab sessions come from a weekly pattern (``weekdays`` + ``hours`` between ``start`` and ``end``) and/or
    explicit ``session`` entries.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: date
    end: date | None = None
    days: int | None = Field(None, gt=0)
    weekdays: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri")
    hours: str | None = None
    session: tuple[Session, ...] = ()

    @field_validator("hours")
    @classmethod
    def _hours(cls, v: str | None) -> str | None:
        if v is not None:
            parse_hours(v)
        return v

    @model_validator(mode="after")
    def _period(self) -> Schedule:
        if self.end is None and self.days is None:
            raise ValueError("give 'days' (24/7 from start) or 'end' (last day of the course)")
        if self.end is not None and self.days is not None:
            expected = self.start + timedelta(days=self.days - 1)
            if expected != self.end:
                raise ValueError(f"'days' = {self.days} from {self.start} ends {expected}, not {self.end}")
        if self.end is not None and self.end < self.start:
            raise ValueError(f"end {self.end} is before start {self.start}")
        for s in self.session:
            if not self.start <= s.date <= self.last_day:
                raise ValueError(f"session on {s.date} is outside the course ({self.start} to {self.last_day})")
        return self

    @property
    def last_day(self) -> date:
        """The last day of the course (inclusive)."""
        if self.end is not None:
            return self.end
        assert self.days is not None
        return self.start + timedelta(days=self.days - 1)

    @property
    def period_days(self) -> int:
        """Calendar days from the first to the last day, inclusive: what monthly offers bill."""
        return (self.last_day - self.start).days + 1

    @property
    def always_on(self) -> bool:
        """24/7 (no lab hours given)."""
        return self.hours is None and not self.session

    def sessions(self) -> list[Session]:
        """Every lab session, in date order (empty for 24/7)."""
        out = list(self.session)
        if self.hours is not None:
            day = self.start
            while day <= self.last_day:
                if WEEKDAYS[day.weekday()] in self.weekdays:
                    out.append(Session(date=day, hours=self.hours))
                day += timedelta(days=1)
        return sorted(out, key=lambda s: (s.date, s.hours))

    def run_lengths_s(self) -> list[int]:
        """Seconds of each run of a seat: one run for 24/7, one per session otherwise."""
        if self.always_on:
            return [self.period_days * 86400]
        return [round(s.length_h * 3600) for s in self.sessions()]

    def in_use_hours(self) -> float:
        """Hours a seat is in use over the course."""
        return sum(self.run_lengths_s()) / 3600

    def starts_at(self) -> datetime:
        """When the course starts."""
        return datetime.combine(self.start, time())


class Group(SeatNeed):
    """Participants who share the same needs."""

    name: str = "participants"
    count: int = Field(gt=0)

    @property
    def need(self) -> SeatNeed:
        """The per-seat need, as the planner and the carver take it."""
        return SeatNeed.model_validate(self.model_dump(include=set(SeatNeed.model_fields)))


class Costs(BaseModel):
    """Cost options beyond the offers' own prices."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    storage_gb_per_seat: float = Field(0, ge=0)
    egress_gb_per_seat: float = Field(0, ge=0)
    stop_outside_sessions: bool = True
    support: bool = False
    hypervisor_licence_usd_per_server: float = Field(0, ge=0)


class VmGuest(BaseModel):
    """``[vm]``: what every seat's VM gets at first boot through cloud-init (``gpuseat vms up``).

    E.g. ``packages = ["nvidia-driver", "nvidia-cuda-toolkit"]`` (Debian guest with non-free enabled)
    and ``commands = ["nvidia-smi"]``; they run as root in the guest, so only the organizer writes them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    packages: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()

    @field_validator("packages")
    @classmethod
    def _packages(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:
            if not re.match(r"^[a-z0-9][a-z0-9+.-]+$", name):
                raise ValueError(f"{name!r} is not a Debian/Ubuntu package name")
        return v

    @field_validator("commands")
    @classmethod
    def _commands(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for cmd in v:
            if not cmd.strip() or any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in cmd):
                raise ValueError(f"{cmd!r}: commands must be one line of text without control characters")
        return v


class Course(BaseModel):
    """A whole course file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "course"
    offers: tuple[str, ...] = ()
    offers_files: tuple[str, ...] = ()
    schedule: Schedule
    group: tuple[Group, ...] = ()
    participants: int | None = Field(None, gt=0)
    needs: SeatNeed | None = None
    costs: Costs = Costs()
    vm: VmGuest = VmGuest()

    @model_validator(mode="after")
    def _groups(self) -> Course:
        if self.participants is not None and self.group:
            raise ValueError("give either 'participants' (with [needs]) or [[group]] tables, not both")
        if self.participants is None and not self.group:
            raise ValueError("give 'participants = N' (with [needs]) or one or more [[group]] tables")
        if self.needs is not None and self.participants is None:
            raise ValueError("[needs] goes with 'participants'; inside [[group]] put the needs in the group")
        names = [g.name for g in self.group]
        if len(set(names)) != len(names):
            raise ValueError("group names must be unique")
        return self

    @property
    def groups(self) -> tuple[Group, ...]:
        """The participant groups (a single group when the file gives ``participants``)."""
        if self.participants is not None:
            needs = self.needs.model_dump() if self.needs else {}
            return (Group(count=self.participants, **needs),)
        return self.group

    @property
    def participant_count(self) -> int:
        """All participants."""
        return sum(g.count for g in self.groups)
