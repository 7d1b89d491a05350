"""Courses in the store: create from a course file, plan option, survey state, course views."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuseat.core.course import Course as CourseFile
from gpuseat.core.seating import COURSE_KEY_PATTERN
from gpuseat.db.models import Assignment, CourseRecord, Participant, Seat
from gpuseat.errors import InputError, NotFound
from gpuseat.store.base import Concern
from gpuseat.store.rows import DEFAULT_ACTOR, _check_timezone, _course, _log, _slug, _summary
from gpuseat.store.views import CourseView, _utc

#: one offers file of a course: (its name as the course file writes it, its text)
OffersText = tuple[str, str]


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
            key=key or _slug(path.stem),
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
        names = [name for name, _text in offers_files]
        if names != list(course.offers_files):
            raise InputError(
                f"the course names the offers files {list(course.offers_files)} but their texts given are of {names}",
                where="offers_files",
                fix="read them with gpuseat.services.planning.read_course_offers (as gpuseat course create does)",
            )
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
        self, course: str | None, text: str, *, changes: list[dict[str, Any]], actor: str = DEFAULT_ACTOR
    ) -> None:
        """Replace the course file's text (already checked as a course file: the portal's settings page)
        with one ``course.policy`` events row per changed field, in one transaction."""
        with self._database.write() as s:
            row = _course(s, course)
            row.source_text, row.updated_at = text, datetime.now(UTC)
            for change in changes:
                _log(s, row.key, actor, "course.policy", detail=change)

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
