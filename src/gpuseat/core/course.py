"""The course file: who needs seats, with what, and when.

A course has groups of participants (each with a :class:`SeatNeed`), a schedule (24/7 for a number of
days, or lab sessions) and cost options. Parsing is strict: unknown keys, zero counts, dates out of
order, ``true`` where a number belongs and courses longer than :data:`MAX_COURSE_DAYS` are input errors
that name the field.

Time model (what billing reads): the schedule is a list of *intervals*, the union of its sessions (two
overlapping sessions are one interval, a session may cross midnight), or one interval from the first
day 00:00 to the day after the last day for a 24/7 course. The *span* runs from the first interval's
start to the last one's end: what anything that keeps running is billed for.

Lab sessions and access: a course may give an *access window* apart from its lab sessions
(``access = "24/7"`` for homework around the clock, or ``access = "08:00-22:00"`` every day of
``access_weekdays``). Seats are open, and cloud seats billed, during the access window and the sessions
(:meth:`Schedule.access_intervals`, which is what :meth:`Schedule.intervals` returns); outside it they
are stopped. :meth:`Schedule.session_intervals` gives the lab sessions alone, :meth:`Schedule.open_at`
the access window open at a moment (what a cloud seat's autostop and a hub's ``--sessions-only`` read).
"""

# No ``from __future__ import annotations`` here: Pydantic would compile and evaluate every field's
# annotation string when these models are built, at every start of gpuseat (issue 39).
import re
from datetime import date, datetime, time, timedelta
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, field_validator, model_validator

from gpuseat.core.intervals import Interval
from gpuseat.core.needs import MAX_GB, SeatNeed
from gpuseat.safe_text import has_ascii_control

Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[str, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: the digits 0-9 only: ``\d`` also matches ``١``, which ``int`` reads as 1 ("1١:00-17:00" was 11:00-17:00)
_HOURS = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])-([01][0-9]|2[0-4]):([0-5][0-9])", re.ASCII)

#: Longest course gpuseat plans (3 years): a longer one is a typo or a data centre, not a course.
MAX_COURSE_DAYS = 1096
#: the last day a course may end: billing and calendars look a month or so past a course's end
LAST_END = date(9998, 12, 31)
#: Most participants in one course.
MAX_PARTICIPANTS = 100_000
#: Most explicit [[schedule.session]] entries.
MAX_SESSIONS = 5000


def parse_hours(text: str) -> tuple[time, float]:
    """``"09:00-17:00"`` → (start time, length in hours); ``"18:00-02:00"`` crosses midnight (8 h)."""
    m = _HOURS.fullmatch(text)  # not match with $, which passes a final newline
    if not m:
        raise ValueError(f"hours must look like 09:00-17:00, got {text!r}")
    h1, m1, h2, m2 = (int(g) for g in m.groups())
    start, end = h1 * 60 + m1, h2 * 60 + m2
    if end == start or (h2 == 24 and m2):
        raise ValueError(f"hours {text!r}: a session needs a length (the end must differ from the start)")
    if end < start:  # crosses midnight
        end += 24 * 60
    return time(h1, m1), (end - start) / 60


class Session(BaseModel):
    """One lab session starting on ``date`` (it may end after midnight)."""

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

    @property
    def interval(self) -> Interval:
        """Start and end as datetimes."""
        start, hours = parse_hours(self.hours)
        begin = datetime.combine(self.date, start)
        return begin, begin + timedelta(hours=hours)


def merge_intervals(intervals: list[Interval]) -> list[Interval]:
    """The union of ``intervals``, sorted: overlapping or touching intervals become one (billed once)."""
    out: list[Interval] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


class Schedule(BaseModel):
    """When seats are in use: 24/7 from ``start`` for ``days`` (or to ``end``), or lab sessions.

    Lab sessions come from a weekly pattern (``weekdays`` + ``hours`` between ``start`` and ``end``) and/or
    explicit ``session`` entries.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: date
    end: date | None = None
    days: StrictInt | None = Field(None, gt=0, le=MAX_COURSE_DAYS)
    weekdays: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri")
    hours: str | None = None
    session: tuple[Session, ...] = Field((), max_length=MAX_SESSIONS)
    access: str | None = None
    access_weekdays: tuple[Weekday, ...] = WEEKDAYS  # type: ignore[assignment]

    @field_validator("hours")
    @classmethod
    def _hours(cls, v: str | None) -> str | None:
        if v is not None:
            parse_hours(v)
        return v

    @field_validator("access")
    @classmethod
    def _access(cls, v: str | None) -> str | None:
        if v is not None and v != "24/7":
            try:
                parse_hours(v)
            except ValueError:
                raise ValueError(f'access must be "24/7" or hours like 08:00-22:00, got {v!r}') from None
        return v

    @model_validator(mode="after")
    def _period(self) -> Self:
        if self.end is None and self.days is None:
            raise ValueError("give 'days' (24/7 from start) or 'end' (last day of the course)")
        late = self.end > LAST_END if self.end is not None else (self.days or 1) - 1 > (LAST_END - self.start).days
        if late:  # date arithmetic past year 9999 fails (billing looks a month on)
            raise ValueError(f"the course must end by {LAST_END}")
        if self.end is not None and self.days is not None:
            expected = self.start + timedelta(days=self.days - 1)
            if expected != self.end:
                raise ValueError(f"'days' = {self.days} from {self.start} ends {expected}, not {self.end}")
        if self.end is not None and self.end < self.start:
            raise ValueError(f"end {self.end} is before start {self.start}")
        if self.period_days > MAX_COURSE_DAYS:
            raise ValueError(
                f"the course lasts {self.period_days} days; gpuseat plans courses of at most {MAX_COURSE_DAYS} days"
            )
        for s in self.session:
            if not self.start <= s.date <= self.last_day:
                raise ValueError(f"session on {s.date} is outside the course ({self.start} to {self.last_day})")
        if self.has_sessions and not self.sessions():
            days = ", ".join(self.weekdays) or "no weekday"
            raise ValueError(
                f"'hours' is set but no date from {self.start} to {self.last_day} falls on {days}: "
                "the schedule has no session"
            )
        if self.access is not None and not self.access_intervals():
            raise ValueError(f"'access' = {self.access!r} opens on no day: check 'access_weekdays'")
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
        """Calendar days from the first to the last day, inclusive."""
        return (self.last_day - self.start).days + 1

    @property
    def has_sessions(self) -> bool:
        """Whether lab sessions are given (``hours`` or ``session`` entries)."""
        return self.hours is not None or bool(self.session)

    @property
    def always_on(self) -> bool:
        """Seats open around the clock: 24/7 without sessions, or ``access = "24/7"``."""
        if self.access is not None:
            return self.access == "24/7"
        return not self.has_sessions

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

    def _whole(self) -> list[Interval]:
        return [(datetime.combine(self.start, time()), datetime.combine(self.last_day + timedelta(days=1), time()))]

    def session_intervals(self) -> list[Interval]:
        """The lab sessions, merged (the whole period for a course without sessions)."""
        if not self.has_sessions:
            return self._whole()
        return merge_intervals([s.interval for s in self.sessions()])

    def access_intervals(self) -> list[Interval]:
        """When seats are open: the access window (every day of ``access_weekdays``) and the sessions,
        merged; the sessions alone when no access window is given."""
        if self.access is None:
            return self.session_intervals()
        if self.access == "24/7":
            return self._whole()
        start, hours = parse_hours(self.access)
        windows = []
        day = self.start
        while day <= self.last_day:
            if WEEKDAYS[day.weekday()] in self.access_weekdays:
                begin = datetime.combine(day, start)
                windows.append((begin, begin + timedelta(hours=hours)))
            day += timedelta(days=1)
        return merge_intervals([*windows, *(self.session_intervals() if self.has_sessions else [])])

    def intervals(self) -> list[Interval]:
        """When seats are open and cloud seats are billed: :meth:`access_intervals`."""
        return self.access_intervals()

    def open_at(self, when: datetime) -> Interval | None:
        """The access window open at ``when`` (naive, the course's local time), or None when seats are
        closed: a cloud seat's autostop stops it at the window's end, a hub limited to sessions refuses."""
        for begin, end in self.access_intervals():
            if begin <= when < end:
                return begin, end
            if begin > when:
                break
        return None

    def span(self) -> Interval:
        """From the first use to the last: what an instance that keeps running, or a disk, is billed for."""
        runs = self.intervals()
        return runs[0][0], runs[-1][1]

    def span_days(self) -> tuple[date, date]:
        """First and last calendar day the span touches (what monthly rent and licence terms cover)."""
        begin, end = self.span()
        return begin.date(), (end - timedelta(microseconds=1)).date()

    def run_lengths_s(self) -> list[int]:
        """Seconds of each run of a seat (one per merged interval)."""
        return [round((end - start).total_seconds()) for start, end in self.intervals()]

    def in_use_hours(self) -> float:
        """Hours a seat is in use over the course."""
        return sum(self.run_lengths_s()) / 3600

    def starts_at(self) -> datetime:
        """When the course starts."""
        return datetime.combine(self.start, time())


class Group(SeatNeed):
    """Participants who share the same needs."""

    name: str = Field("participants", min_length=1, max_length=100)
    count: StrictInt = Field(gt=0, le=MAX_PARTICIPANTS)

    @property
    def need(self) -> SeatNeed:
        """The per-seat need, as the planner and the carver take it."""
        return SeatNeed.model_validate(self.model_dump(include=set(SeatNeed.model_fields)))


class Costs(BaseModel):
    """Cost options beyond the offers' own prices."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    storage_gb_per_seat: StrictFloat = Field(0, ge=0, le=MAX_GB)
    egress_gb_per_seat: StrictFloat = Field(0, ge=0, le=MAX_GB * 100)
    stop_outside_sessions: StrictBool = True
    support: StrictBool = False
    hypervisor_licence_usd_per_server: StrictFloat = Field(0, ge=0, le=1e9)


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
        import unicodedata  # here: only a course with [vm] commands needs it (start-up, issue 39)

        for cmd in v:
            if not cmd.strip() or any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in cmd):
                raise ValueError(f"{cmd!r}: commands must be one line of text without control characters")
        return v


class Quoted(BaseModel):
    """A figure someone published for this course (a blog post, a quote), shown beside gpuseat's own
    with one line on where the difference comes from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    what: str = Field(min_length=1, max_length=300)
    usd: StrictFloat = Field(ge=0, le=1e12)
    source: str = Field(min_length=1, max_length=300)
    offer: str = Field("", max_length=200)  # the offer id the figure is for: gpuseat's option for it is shown
    difference: str = Field("", max_length=500)


class Policy(BaseModel):
    """``[policy]``: the course's seat-hour quota, idle stop and readiness lead (see docs/policy.md).

    Every field is optional: ``quota_hours`` unset means no quota, ``idle_minutes`` unset means no idle
    stop, ``never_connected_hours`` unset means a seat nobody logged in to is never stopped for it.
    A group's ``[groups.<name>.policy]`` sets any of these for that group's participants.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    quota_hours: StrictFloat | None = Field(None, ge=0, le=100_000)
    idle_gpu_percent: StrictFloat | None = Field(None, ge=0, le=100)
    idle_minutes: StrictInt | None = Field(None, ge=1, le=7 * 24 * 60)
    grace_minutes: StrictInt | None = Field(None, ge=0, le=24 * 60)
    lead_minutes: StrictInt | None = Field(None, ge=0, le=24 * 60)
    never_connected_hours: StrictFloat | None = Field(None, gt=0, le=MAX_COURSE_DAYS * 24)

    @field_validator("quota_hours", "idle_gpu_percent", "never_connected_hours", mode="before")
    @classmethod
    def _number(cls, v: object) -> object:
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


#: what a policy field is when neither the group nor the course sets it
POLICY_DEFAULTS = {"idle_gpu_percent": 5.0, "grace_minutes": 10, "lead_minutes": 15}


class GroupSection(BaseModel):
    """``[groups.<name>]``: settings of one group of participants (today: its ``policy``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: Policy = Policy()


class Course(BaseModel):
    """A whole course file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field("course", max_length=200)
    offers: tuple[str, ...] = ()
    offers_files: tuple[str, ...] = ()
    gpu: tuple[str, ...] = Field((), max_length=50)  # GPU model globs, any provider: ["A100*", "H100*"]
    quoted: tuple[Quoted, ...] = Field((), max_length=20)
    schedule: Schedule
    group: tuple[Group, ...] = Field((), max_length=100)
    participants: StrictInt | None = Field(None, gt=0, le=MAX_PARTICIPANTS)
    needs: SeatNeed | None = None
    costs: Costs = Costs()
    vm: VmGuest = VmGuest()
    policy: Policy = Policy()
    group_sections: dict[str, GroupSection] = Field({}, alias="groups", max_length=100)
    #: where the agent posts idle warnings and, before each session, the broken seats (docs/policy.md)
    webhook: str | None = None

    @field_validator("offers_files")
    @classmethod
    def _offers_files(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:  # a NUL made the path an internal error ("embedded null byte") where the plan opened it
            if not name.strip() or has_ascii_control(name):
                raise ValueError(
                    f"{name!r} is not a file name (empty, or with a control character): give each offers file's "
                    "name, relative to the course file's folder, e.g. offers-h200.toml"
                )
        return v

    @field_validator("webhook")
    @classmethod
    def _webhook(cls, v: str | None) -> str | None:
        from gpuseat.errors import InputError
        from gpuseat.urls import http_url

        try:
            return None if v is None else http_url(v, where="webhook")
        except InputError as exc:
            raise ValueError(f"{exc.what}; {exc.fix}") from None

    @model_validator(mode="after")
    def _groups(self) -> Self:
        if self.participants is not None and self.group:
            raise ValueError("give either 'participants' (with [needs]) or [[group]] tables, not both")
        if self.participants is None and not self.group:
            raise ValueError("give 'participants = N' (with [needs]) or one or more [[group]] tables")
        if self.needs is not None and self.participants is None:
            raise ValueError("[needs] goes with 'participants'; inside [[group]] put the needs in the group")
        names = [g.name for g in self.group]
        if len(set(names)) != len(names):
            raise ValueError("group names must be unique")
        if self.participant_count > MAX_PARTICIPANTS:
            raise ValueError(f"{self.participant_count} participants; gpuseat plans at most {MAX_PARTICIPANTS:,}")
        unknown = sorted(set(self.group_sections) - set(names)) if self.group else []
        if unknown:
            raise ValueError(
                f"[groups.{unknown[0]}] names no [[group]] of this course (its groups: {', '.join(names)}): "
                f"name one of them, or add a [[group]] named {unknown[0]!r}"
            )
        return self

    def policy_for(self, group: str | None) -> dict[str, float | int | None]:
        """The policy a participant of ``group`` gets: the group's value, else the course's, else the default."""
        own = self.group_sections.get(group or "")
        out: dict[str, float | int | None] = {}
        for name in Policy.model_fields:
            value = getattr(own.policy, name) if own is not None else None
            if value is None:
                value = getattr(self.policy, name)
            out[name] = POLICY_DEFAULTS.get(name) if value is None else value
        return out

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
