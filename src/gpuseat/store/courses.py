"""Courses in the store: create from a course file, plan option, survey state, course views."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, cast

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuseat.core.course import Course as CourseFile
from gpuseat.core.seating import COURSE_KEY_PATTERN
from gpuseat.db.models import Assignment, CourseRecord, Participant, Seat
from gpuseat.errors import InputError, NotFound, did_you_mean
from gpuseat.store.base import Concern
from gpuseat.store.rows import DEFAULT_ACTOR, _check_timezone, _course, _log, _slug, _summary
from gpuseat.store.views import CourseView, _utc

#: one offers file of a course: (its name as the course file writes it, its text)
OffersText = tuple[str, str]

#: the course file's fields a plan option does not price: a change of any other asks for the plan again
_NOT_PRICED = ("name", "timezone", "policy", "groups", "webhook", "text")


def course_key_of(path: Path) -> str:
    """The course key ``course create`` and ``course update`` take from a course file's name."""
    return _slug(path.stem)


@dataclass(frozen=True)
class CourseUpdate:
    """What ``update_course`` found: the field changes (each ``{"field", "from", "to"}``), which of them the stored
    plan option priced (``replan``; empty without a stored option), and the course as it now is."""

    view: CourseView
    changes: list[dict[str, Any]]
    replan: list[str]


class Courses(Concern):
    """``store.courses``: create a course from its file, its plan option and survey state, read it back."""

    def create_course(
        self,
        path: Path,
        *,
        key: str | None = None,
        timezone: str = "UTC",
        plan_option: dict[str, Any] | None = None,
        offers_files: Sequence[OffersText] = (),
        actor: str = DEFAULT_ACTOR,
    ) -> CourseView:
        """Store a course file (text and parsed summary); ``key`` defaults to the file name's slug.
        ``offers_files``: its own offers files, read and checked by the caller
        (:func:`gpuseat.services.planning.read_course_offers`: the store cannot check offers)."""
        from gpuseat.files import parse_toml, read_text, validate

        text = read_text(path)  # read once: the text stored is the text parsed
        parsed = validate(CourseFile, parse_toml(text, where=str(path)), where=str(path), text=text)
        return self.create_course_from(
            parsed,
            key=key or course_key_of(path),
            source_text=text,
            timezone=timezone,
            plan_option=plan_option,
            offers_files=offers_files,
            actor=actor,
        )

    def create_course_from(
        self,
        course: CourseFile,
        *,
        key: str,
        source_text: str | None = None,
        timezone: str = "UTC",
        plan_option: dict[str, Any] | None = None,
        offers_files: Sequence[OffersText] = (),
        actor: str = DEFAULT_ACTOR,
    ) -> CourseView:
        """Store an already parsed course under ``key``; an existing key is an input error. The texts of the
        offers files the course names come in ``offers_files``, one per name in the course's order: a course
        whose offers would be lost is refused, so that every re-plan of it prices what ``plan`` priced."""
        _check_offers(course, offers_files)
        if not COURSE_KEY_PATTERN.fullmatch(key):
            raise InputError(
                f"course key {key!r} is not a slug",
                where="key",
                fix="use lower-case letters, digits and '-', e.g. dl-2016",
            )
        _check_timezone(timezone)
        now = datetime.now(UTC)
        with self._database.write() as s:
            if s.scalar(select(CourseRecord.id).where(CourseRecord.key == key)) is not None:
                raise InputError(
                    f"a course {key!r} exists already",
                    where="key",
                    fix="choose another key (--key) or use the existing course",
                )
            row = CourseRecord(
                key=key,
                name=course.name,
                source_text=source_text,
                summary=_summary(course),
                timezone=timezone,
                starts_on=course.schedule.start,
                ends_on=course.schedule.last_day,
                plan_option=plan_option,
                offers_files=[{"name": name, "text": text} for name, text in offers_files] or None,
                created_at=now,
                updated_at=now,
            )
            s.add(row)
            s.flush()
            _log(s, key, actor, "course.create", detail={"name": course.name})
            return self._course_view(s, row)

    def set_plan_option(self, course: str | None, option: dict[str, Any], *, actor: str = DEFAULT_ACTOR) -> CourseView:
        """Record the plan option the organiser chose (the JSON of one ``plan`` option)."""
        with self._database.write() as s:
            row = _course(s, course)
            row.plan_option, row.updated_at = option, datetime.now(UTC)
            _log(s, row.key, actor, "course.plan", detail={"rank": option.get("rank")})
            return self._course_view(s, row)

    def set_survey_state(self, course: str | None, state: str, *, actor: str = DEFAULT_ACTOR) -> CourseView:
        """Record where the course's survey stands (free text up to 32 characters, e.g. ``open``)."""
        if not re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", state):
            raise InputError(f"survey state {state!r}", where="survey_state", fix="use a short lower-case word")
        with self._database.write() as s:
            row = _course(s, course)
            row.survey_state, row.updated_at = state, datetime.now(UTC)
            _log(s, row.key, actor, "course.survey", detail={"state": state})
            return self._course_view(s, row)

    def list_courses(self) -> list[CourseView]:
        """Every course, by key."""
        with self._database.read() as s:
            return [self._course_view(s, c) for c in s.scalars(select(CourseRecord).order_by(CourseRecord.key))]

    def get_course(self, course: str | None = None) -> CourseView:
        """One course (``None``: the only one)."""
        with self._database.read() as s:
            return self._course_view(s, _course(s, course))

    def course_file(self, course: str | None = None) -> CourseFile:
        """The stored course file, parsed again (for needs and schedule)."""
        from gpuseat.files import validate

        with self._database.read() as s:
            row = _course(s, course)
            if row.source_text is None:
                raise NotFound(f"course {row.key!r} has no course file", where="course", fix="create it from a file")
            import tomllib

            return validate(CourseFile, tomllib.loads(row.source_text), where=f"course {row.key}")

    def offers_texts(self, course: str | None = None) -> list[OffersText] | None:
        """The course's own offers files as stored by ``course create`` (name, text), in the course file's
        order; None when none were stored (it names none, or it was stored before migration 0017)."""
        with self._database.read() as s:
            row = _course(s, course)
            if row.offers_files is None:
                return None
            return [(str(f["name"]), str(f["text"])) for f in row.offers_files]

    def course_text(self, course: str | None = None) -> str:
        """The stored course file's text, as written (comments included)."""
        with self._database.read() as s:
            row = _course(s, course)
            if row.source_text is None:
                raise NotFound(f"course {row.key!r} has no course file", where="course", fix="create it from a file")
            return row.source_text

    def set_course_text(
        self,
        course: str | None,
        text: str,
        *,
        changes: list[dict[str, Any]],
        base: str | None = None,
        actor: str = DEFAULT_ACTOR,
    ) -> None:
        """Replace the course file's text (already checked as a course file: the portal's settings page)
        with one ``course.policy`` events row per changed field, in one transaction. ``base``: the stored text
        ``text`` was made from; another stored since (a ``course update`` meanwhile) is an input error, nothing
        written (its dates and sessions would go back to the old file's)."""
        with self._database.write() as s:
            row = _course(s, course)
            if base is not None:
                s.refresh(row, with_for_update=True)  # PostgreSQL: as update_course locks it
                if row.source_text != base:
                    raise InputError(
                        "the course file was changed meanwhile (gpuseat course update, or another save)",
                        where=f"course {row.key}",
                        fix="reload the page and make the change again",
                    )
            row.source_text, row.updated_at = text, datetime.now(UTC)
            for change in changes:
                _log(s, row.key, actor, "course.policy", detail=change)

    def update_course(
        self,
        key: str,
        course: CourseFile,
        source_text: str,
        offers_files: Sequence[OffersText] = (),
        *,
        timezone: str | None = None,
        plan_option: dict[str, Any] | None = None,
        dry_run: bool = False,
        actor: str = DEFAULT_ACTOR,
    ) -> CourseUpdate:
        """Replace the stored course file of course ``key`` with ``course`` (its text ``source_text`` and its
        offers files, checked by the caller as ``create_course`` takes them), and with it the name, summary, dates
        and offers files (``timezone``, ``plan_option``: when given), in one transaction with one ``course.update``
        events row naming the changed fields. Nothing changed (or ``dry_run``): nothing is written. A course
        stored without a file gets this one. Refused, each an input error, with nothing written: an unknown key
        (``course create`` stores a new course), an archived course, and a file that would leave stored rows
        behind: a participant of a group it no longer has or of a group now planned smaller than the roster, a
        seat reserved for a group it no longer has."""
        _check_offers(course, offers_files)
        if timezone is not None:
            _check_timezone(timezone)
        with self._database.read() if dry_run else self._database.write() as s:
            q = select(CourseRecord).where(CourseRecord.key == key)
            row = s.scalar(q if dry_run else q.with_for_update())
            if row is None:
                known = list(s.scalars(select(CourseRecord.key).order_by(CourseRecord.key)))
                some = f" (one of: {', '.join(known[:10])})" if known else ""
                raise NotFound(
                    f"no course {key!r} to update.{did_you_mean(key, known)}",
                    where="key",
                    fix=f"store the file as a new course with gpuseat course create, or give the key of the course "
                    f"to update{some}",
                )
            if row.archived_at is not None:
                from gpuseat.store.claims import archived_error

                raise archived_error(row.key)
            changes = _changes(row, course, source_text, offers_files, timezone)
            if plan_option is not None and plan_option != row.plan_option:
                changes.append({"field": "plan_option", "from": _rank(row.plan_option), "to": _rank(plan_option)})
            fields = [str(c["field"]) for c in changes]
            priced = [f for f in fields if f.split(".")[0] not in _NOT_PRICED and f != "plan_option"]
            replan = priced if row.plan_option is not None and plan_option is None else []
            if changes:
                _check_in_use(s, row, course)
            if not changes or dry_run:
                return CourseUpdate(self._course_view(s, row), changes, replan)
            row.name, row.source_text, row.summary = course.name, source_text, _summary(course)
            row.starts_on, row.ends_on = course.schedule.start, course.schedule.last_day
            row.offers_files = [{"name": name, "text": text} for name, text in offers_files] or None
            row.timezone = timezone or row.timezone
            row.plan_option = plan_option if plan_option is not None else row.plan_option
            row.updated_at = datetime.now(UTC)
            _log(s, row.key, actor, "course.update", detail={"fields": fields, "changes": changes})
            return CourseUpdate(self._course_view(s, row), changes, replan)

    def _course_view(self, s: Session, row: CourseRecord) -> CourseView:
        participants = s.scalar(select(func.count()).where(Participant.course_id == row.id)) or 0
        seats = s.scalar(select(func.count()).where(Seat.course_id == row.id)) or 0
        assigned = (
            s.scalar(
                select(func.count())
                .select_from(Assignment)
                .join(Seat, Seat.id == Assignment.seat_id)
                .where(Seat.course_id == row.id, Assignment.valid_to.is_(None))
            )
            or 0
        )
        return CourseView(
            key=row.key,
            name=row.name,
            timezone=row.timezone,
            starts_on=row.starts_on,
            ends_on=row.ends_on,
            summary=dict(row.summary or {}),
            plan_option=row.plan_option,
            survey_state=row.survey_state,
            participants=participants,
            seats=seats,
            assigned=assigned,
            created_at=cast(datetime, _utc(row.created_at)),
            updated_at=cast(datetime, _utc(row.updated_at)),
        )


def _check_offers(course: CourseFile, offers_files: Sequence[OffersText]) -> None:
    names = [name for name, _text in offers_files]
    if names != list(course.offers_files):
        raise InputError(
            f"the course names the offers files {list(course.offers_files)} but their texts given are of {names}",
            where="offers_files",
            fix="read them with gpuseat.services.planning.read_course_file (as gpuseat course create does)",
        )


def _rank(option: dict[str, Any] | None) -> str | None:
    return None if option is None else f"option {option.get('rank')}, ${option.get('total_usd')}"


def _iso(day: date | None) -> str | None:
    return None if day is None else day.isoformat()


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:12]


def _stored_file(row: CourseRecord) -> dict[str, Any] | None:
    """The stored course file as a dict of its fields (None: the course was stored without a file)."""
    if row.source_text is None:
        return None
    import tomllib

    from gpuseat.files import validate

    old = validate(CourseFile, tomllib.loads(row.source_text), where=f"course {row.key}")
    return old.model_dump(mode="json", by_alias=True, exclude_none=True)


def _changes(
    row: CourseRecord,
    course: CourseFile,
    text: str,
    offers_files: Sequence[OffersText],
    timezone: str | None,
) -> list[dict[str, Any]]:
    """Each field the new file (and time zone) changes, as ``{"field", "from", "to"}``: the stored columns
    (name, dates, time zone), then the file's fields down to the values in its tables (``schedule.session``,
    ``policy.quota_hours``, ``group.server.count``: :func:`_diff`), then the offers files (their names, and a text
    changed under the same name by its hash); a file changed in its comments or layout only: ``text``."""
    out: list[dict[str, Any]] = []

    def add(field: str, before: object, after: object) -> None:
        if before != after:
            out.append({"field": field, "from": before, "to": after})

    add("name", row.name, course.name)
    add("starts_on", _iso(row.starts_on), course.schedule.start.isoformat())
    add("ends_on", _iso(row.ends_on), course.schedule.last_day.isoformat())
    if timezone is not None:
        add("timezone", row.timezone, timezone)
    old, new = _stored_file(row), course.model_dump(mode="json", by_alias=True, exclude_none=True)
    if old is None:
        add("course file", None, "given")
    else:
        for name in [*old, *(k for k in new if k not in old)]:
            if name not in ("name", "offers_files"):  # the stored columns above, the offers files below
                _diff(name, old.get(name), new.get(name), add)
    stored = {str(f["name"]): str(f["text"]) for f in row.offers_files or ()}
    given = dict(offers_files)
    add("offers_files", list(stored), list(given))
    for name in [n for n in given if n in stored]:
        add(f"offers_files.{name}", _sha(stored[name]), _sha(given[name]))
    if not out and text != row.source_text:
        add("text", _sha(row.source_text or ""), _sha(text))
    return out


def _diff(field: str, before: object, after: object, add: Callable[[str, object, object], None]) -> None:
    """``add`` each change from ``before`` to ``after``, down to the values that are no table: ``[[group]]`` tables
    by their names (a group added or removed is one change), a table's fields each (``group.server.count``)."""
    if field == "group":
        before, after = ({g["name"]: g for g in groups or ()} for groups in (before, after))  # type: ignore[attr-defined]
    if not (isinstance(before, dict) and isinstance(after, dict)):
        add(field, before, after)
        return
    for sub in [*before, *(k for k in after if k not in before)]:
        if field != "schedule" or sub not in ("start", "end", "days"):  # the dates: starts_on, ends_on
            _diff(f"{field}.{sub}", before.get(sub), after.get(sub), add)


def _check_in_use(s: Session, row: CourseRecord, course: CourseFile) -> None:
    """Refuse a file that would leave stored rows naming what it no longer has (the roster's and the seats' own
    rules: a participant's group is one of the course's, and no group has more people than the file plans)."""
    planned = {g.name: g.count for g in course.groups}
    wrong: list[str] = []
    fixes = ["keep those groups (and counts) in the file"]
    counts = s.execute(
        select(Participant.group_name, func.count(), func.min(Participant.key))
        .where(Participant.course_id == row.id, Participant.group_name.is_not(None))
        .group_by(Participant.group_name)
        .order_by(Participant.group_name)
    )
    for group, n, first in counts:
        if group not in planned:
            wrong.append(f"group {group!r} is gone but {n} participant(s) of the roster are in it (e.g. {first})")
        elif n > planned[group]:
            wrong.append(f"group {group!r} plans {planned[group]} seat(s) but the roster has {n} participants in it")
    for key, groups in s.execute(select(Seat.key, Seat.groups).where(Seat.course_id == row.id).order_by(Seat.key)):
        gone = [g for g in groups or () if g not in planned]
        if gone:
            wrong.append(f"seat {key} is reserved for group {gone[0]!r}, which is gone")
    if any(w.startswith("group") for w in wrong):
        fixes.append(
            "give those participants another group first (gpuseat roster import, its group column), or take those "
            "who left off the course (gpuseat roster remove P)"
        )
    if any(w.startswith("seat") for w in wrong):
        fixes.append("remove those seats first (gpuseat seats remove) and add them again for a group the file has")
    if wrong:
        raise InputError(
            f"this file would orphan what the course stores: {'; '.join(wrong[:5])}"
            + (f"; and {len(wrong) - 5} more" if len(wrong) > 5 else ""),
            where=f"course {row.key}",
            fix="; or ".join(fixes),
        )
