"""The rows of a course export (:mod:`gpuseat.store.export`) as pydantic models: what ``course import`` accepts.

Each member's rows follow the rules the store's own writers follow (the roster's key, login and SSH key; a seat's
host, device and way in), so an edited or another site's archive stores nothing those writers would refuse.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpuseat.core.logins import is_participant_login
from gpuseat.core.roster import PARTICIPANT_KEY, check_ssh_key
from gpuseat.core.seating import COURSE_KEY_PATTERN, KEY_PATTERN, SEAT_KINDS, SEAT_STATES
from gpuseat.safe_text import has_ascii_control, has_control
from gpuseat.store.access import check_access
from gpuseat.store.archive_rules import EngineSettingRow
from gpuseat.store.specs import PROFILE_PATTERN, _device, _host, _known_engine, _one_line


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_Key = Field(pattern=KEY_PATTERN.pattern)
_When = datetime | None


def _plain_line(v: str | None) -> str | None:
    """``v`` by the roster's cell rule (:func:`gpuseat.core.roster.parse_roster`), which a release's reason and a
    top-up's note follow too: one line, no escape sequence, C1 control or bidirectional override."""
    if v is not None and (has_ascii_control(v) or has_control(v)):
        raise ValueError(
            "control characters (line breaks, escape sequences, bidirectional overrides): "
            "keep it one line of plain text"
        )
    return v


def _plain_answers(v: Any) -> Any:
    """A survey response's answers by the portal's rule for an answer (:mod:`gpuseat.core.survey`): line breaks
    may stay in free text, no escape sequence, C1 control or bidirectional override anywhere."""
    todo = [v]  # a stack, not recursion: an archive's answers may nest as deep as JSON lets them
    while todo:
        text = todo.pop()
        if isinstance(text, dict):
            todo += [*text.keys(), *text.values()]
        elif isinstance(text, list):
            todo += text
        elif isinstance(text, str) and has_control(text):
            raise ValueError(
                "control characters (escape sequences, bidirectional overrides) in an answer: "
                "keep it plain text (line breaks may stay)"
            )
    return v


class CourseRow(_Row):
    key: str = Field(pattern=COURSE_KEY_PATTERN.pattern)
    name: str = Field(max_length=256)
    source_text: str | None = Field(None, max_length=1_000_000)
    summary: dict[str, Any]
    timezone: str = Field(max_length=64)
    starts_on: date | None = None
    ends_on: date | None = None
    plan_option: dict[str, Any] | None = None
    survey_state: str | None = Field(None, max_length=32)
    created_at: datetime
    updated_at: datetime
    archived_at: _When = None
    offers_files: list[dict[str, str]] | None = Field(None, max_length=100)  # absent in exports before 0017


class ParticipantRow(_Row):
    """A participant as the roster has them: an archive's key, login and SSH key follow the roster's rules
    (an edited or another site's export gave a participant the login ``root``, a key ``al ice``, or an SSH
    key with ``command=`` options that went into authorized_keys)."""

    key: str = Field(max_length=128, min_length=1, pattern=PARTICIPANT_KEY.pattern)
    name: str | None = Field(None, max_length=256)
    email: str | None = Field(None, max_length=256)
    group: str | None = Field(None, max_length=128)
    unix_user: str | None = Field(None, max_length=64)
    ssh_key: str | None = Field(None, max_length=20_000)
    created_at: _When = None
    updated_at: _When = None

    _lines = field_validator("name", "email", "group", "unix_user")(_plain_line)

    @field_validator("unix_user")
    @classmethod
    def _login(cls, v: str | None) -> str | None:
        if v is not None and not is_participant_login(v):
            raise ValueError(f"{v!r} is not a participant's login (the roster's rule: no system account, no a;b)")
        return v

    @field_validator("ssh_key")
    @classmethod
    def _ssh_key(cls, v: str | None) -> str | None:
        if v is not None:
            _plain_line(v)  # the roster's cell rule: C1 controls and bidi overrides too
            check_ssh_key(v)  # ValueError: options (command=…), two keys, a private key, a cut one
        return v


class ExportSeatRow(_Row):
    """A seat by the rules of a seat the store adds (:class:`gpuseat.store.specs.SeatSpec`): an archive's host
    ``-oProxyCommand=…`` or ``gpu1;reboot``, a device or profile that is none was imported as it came."""

    key: str = _Key
    kind: Literal[SEAT_KINDS]  # type: ignore[valid-type]
    host: str | None = Field(None, max_length=256)
    device_uuid: str | None = Field(None, max_length=96)
    profile: str | None = Field(None, max_length=64, pattern=PROFILE_PATTERN)
    memory_gb: float | None = Field(None, ge=0, le=1e6)
    groups: list[str] = Field(default_factory=list, max_length=64)
    engine: str = Field(max_length=32)
    _engine = field_validator("engine")(lambda v: _known_engine(v))
    engine_ref: str | None = Field(None, max_length=512)
    state: Literal[SEAT_STATES]  # type: ignore[valid-type]
    state_reason: str | None = Field(None, max_length=20_000)
    state_at: _When = None
    connect: str | None = Field(None, max_length=20_000)
    access: dict[str, Any] | None = None  # core.readiness.Access.to_dict(); absent in older exports
    readiness: dict[str, Any] | None = None  # the last seats check (Readiness.to_dict())
    created_at: _When = None

    _lines = field_validator("engine_ref", "connect")(_one_line)
    _hosts = field_validator("host")(_host)
    _devices = field_validator("device_uuid")(_device)
    # a way in by the rules gpuseat makes one with: no command but the one it builds (ssh -oProxyCommand=…)
    _access = field_validator("access")(lambda v, info: check_access(v, seat=info.data.get("key", "?")))


class AssignmentRow(_Row):
    seat: str
    participant: str
    valid_from: datetime
    valid_to: _When = None
    mode: str = Field("assigned", max_length=16)
    ended_by: str | None = Field(None, max_length=32)
    _reason = field_validator("ended_by")(_plain_line)  # a release's reason (store/seats.py)

    @model_validator(mode="after")
    def _forwards(self) -> AssignmentRow:
        """An end before the start is the archive's error (the store's own guard made it exit 1, "the course
        database failed", with a fix about --db)."""
        start, end = (d if d is None or d.tzinfo else d.replace(tzinfo=UTC) for d in (self.valid_from, self.valid_to))
        if end is not None and start is not None and end < start:
            raise ValueError(f"valid_to {self.valid_to} is before valid_from {self.valid_from}")
        return self


class TokenRow(_Row):
    participant: str
    token_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    created_at: datetime
    last_used_at: _When = None
    revoked_at: _When = None


class EventRow(_Row):
    at: datetime
    actor: str = Field(max_length=128)
    action: str = Field(max_length=32)
    participant: str | None = Field(None, max_length=128)
    seat: str | None = Field(None, max_length=128)
    detail: dict[str, Any] | None = None


class ResponseRow(_Row):
    participant: str
    answers: dict[str, Any]
    submitted_at: datetime
    updated_at: datetime
    _answers = field_validator("answers")(_plain_answers)


class SurveyRow(_Row):
    template_key: str = Field(max_length=64)
    template_text: str = Field(max_length=1_000_000)
    opened_at: _When = None
    closed_at: _When = None
    responses: list[ResponseRow] = Field(default_factory=list)


class SeatRequestRow(_Row):
    participant: str
    seat: str | None = Field(None, max_length=128)
    action: Literal["start", "stop", "restart", "reset", "key"]
    payload: dict[str, Any] | None = None
    state: Literal["pending", "done", "failed"]
    reason: str | None = Field(None, max_length=20_000)
    actor: str = Field(max_length=128)
    requested_at: datetime
    done_at: _When = None


class SeatHoursRow(_Row):
    participant: str
    kind: Literal["topup", "quota"]
    hours: float = Field(ge=0, le=100_000)
    note: str | None = Field(None, max_length=500)
    actor: str = Field(max_length=128)
    at: datetime
    _note = field_validator("note")(_plain_line)  # a top-up's note (safe_text.check_note)


_ROWS: dict[str, type[BaseModel]] = {
    "participants.json": ParticipantRow,
    "seats.json": ExportSeatRow,
    "assignments.json": AssignmentRow,
    "access_tokens.json": TokenRow,
    "events.json": EventRow,
    "seat_requests.json": SeatRequestRow,
    "seat_hours.json": SeatHoursRow,
    "engine_settings.json": EngineSettingRow,
}
