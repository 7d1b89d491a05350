"""What an export's rows must say together, checked before ``course import`` stores anything
(:func:`gpuseat.store.export.import_course`), and the course's engine settings that travel with it.

A row can be well formed and the archive still describe what the store never holds: a seat held by two
participants at once (or a participant holding two seats at once), a link that was rotated or revoked made
active again (a second active link of one participant, an active link of an archived course, or one of a
participant whose links ``token.revoke`` ended with none issued since), a seat request for a seat the course
never had. Each is one :class:`InputError` naming the member and row; nothing is stored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuseat.db.models import EngineSetting
from gpuseat.errors import InputError
from gpuseat.store.specs import _known_engine

__all__ = ["EngineSettingRow", "add_engine_settings_rows", "check_rows", "engine_settings_rows"]

_FIX = "use an intact copy of the export"
_END = datetime.max.replace(tzinfo=UTC)


class EngineSettingRow(BaseModel):
    """One engine's settings for the course (``engine_settings.json``; absent in older exports)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str = Field(max_length=32)
    _engine = field_validator("engine")(lambda v: _known_engine(v))
    values: dict[str, Any]
    updated_at: datetime


def engine_settings_rows(s: Session, course_id: int) -> list[dict[str, Any]]:
    """The course's engine settings as ``engine_settings.json`` holds them."""
    rows = s.scalars(select(EngineSetting).where(EngineSetting.course_id == course_id).order_by(EngineSetting.engine))
    return [{"engine": r.engine, "values": dict(r.values), "updated_at": _utc(r.updated_at).isoformat()} for r in rows]


def add_engine_settings_rows(s: Session, course_id: int, rows: list[EngineSettingRow]) -> None:
    """Store the (checked) settings of an imported course."""
    s.add_all(
        EngineSetting(course_id=course_id, engine=r.engine, values=r.values, updated_at=r.updated_at) for r in rows
    )


def _utc(value: datetime | None) -> datetime:
    if value is None:
        return _END
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def check_rows(where: str, got: dict[str, Any], *, archived: bool) -> None:
    """Refuse an archive whose rows together say what the store never holds (module doc)."""
    from gpuseat.engines.registry import validate_settings

    _check_overlaps(where, got["assignments.json"])
    _check_links(where, got["access_tokens.json"], got["events.json"], archived=archived)
    seats = {x.key for x in got["seats.json"]}
    for e in got["events.json"]:  # a seat removed later: its requests name it, seats.json does not
        if e.action == "seats.remove" and isinstance(e.detail, dict):
            seats |= {x.get("key") for x in e.detail.get("seats") or () if isinstance(x, dict)}
    for i, r in enumerate(got["seat_requests.json"]):
        if r.seat is not None and r.seat not in seats:
            raise InputError(
                f"a request for seat {r.seat!r}, which the course has not got (nor removed)",
                where=f"{where}: seat_requests.json[{i}]",
                fix=_FIX,
            )
    for i, row in enumerate(got["engine_settings.json"]):
        try:
            validate_settings(row.engine, dict(row.values))
        except InputError as exc:
            raise InputError(exc.what, where=f"{where}: engine_settings.json[{i}] ({exc.where})", fix=_FIX) from None


def _check_overlaps(where: str, rows: list[Any]) -> None:
    """No seat held by two participants at once, no participant holding two seats at once."""
    for field, other in (("seat", "participant"), ("participant", "seat")):
        by: dict[str, list[tuple[datetime, datetime, int]]] = {}
        for i, a in enumerate(rows):
            by.setdefault(getattr(a, field), []).append((_utc(a.valid_from), _utc(a.valid_to), i))
        for key, spans in by.items():
            spans.sort()
            for (_s, end, i), (start, _e, j) in pairwise(spans):
                if end > start:
                    one, two = getattr(rows[i], other), getattr(rows[j], other)
                    what = f"seat {key} held by {one} and {two}" if field == "seat" else f"{key} holds {one} and {two}"
                    raise InputError(
                        f"{what} at once (from {rows[j].valid_from}, before {rows[i].valid_to or 'an open end'})",
                        where=f"{where}: assignments.json[{j}]",
                        fix=_FIX,
                    )


def _check_links(where: str, tokens: list[Any], events: list[Any], *, archived: bool) -> None:
    """A link rotated or revoked stays so: one active link per participant at most, none in an archived
    course, none for a participant whose links ``token.revoke`` ended with no ``token.issue`` since."""
    ended: set[str] = set()
    for e in events:  # in the log's order, whatever the clock did
        named = set((e.detail or {}).get("participants") or ()) if isinstance(e.detail, dict) else set()
        if e.action == "token.revoke":
            ended |= named
        elif e.action in ("token.issue", "token.rotate"):
            ended -= named
    active: set[str] = set()
    for i, t in enumerate(tokens):
        if t.revoked_at is not None:
            continue
        place = f"{where}: access_tokens.json[{i}]"
        if t.participant in active:
            raise InputError(f"two active links of {t.participant} (a rotated link is revoked)", where=place, fix=_FIX)
        if archived:
            raise InputError("an active link in an archived course (archiving revokes them)", where=place, fix=_FIX)
        if t.participant in ended:
            raise InputError(
                f"a link of {t.participant} is active, but events.json says their links were revoked and none "
                "issued since",
                where=place,
                fix=_FIX,
            )
        active.add(t.participant)
