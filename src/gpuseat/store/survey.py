"""Survey rows in the store: one survey per course (its template's TOML text) and one editable response
per participant.

A response is written in one transaction with an upsert (``INSERT … ON CONFLICT DO UPDATE``), so two
submissions of the same participant never make two rows, and a submission acknowledged to the browser
is committed (SQLite in WAL mode, PostgreSQL) before the answer is sent. Templates are parsed by the
service layer (:mod:`gpuseat.services.survey`); here they are text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, insert, select, update

from gpuseat.db.models import CourseRecord, Event, Participant, Survey, SurveyResponse
from gpuseat.errors import InputError, NotFound
from gpuseat.store.base import Concern

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection


OPEN, CLOSED = "open", "closed"
DEFAULT_TEMPLATE = "course"  # the bundled template a course's survey starts with (course-2016 is bundled too)


class SurveyRows(Concern):
    """The survey tables of one store; courses and participants are named by key, as everywhere."""

    @functools.cached_property
    def _default(self) -> tuple[str, str]:
        """(key, TOML text) of the template a course's survey starts with (read once, when first needed)."""
        text = resources.files("gpuseat.catalog").joinpath("data", "surveys", f"{DEFAULT_TEMPLATE}.toml")
        return DEFAULT_TEMPLATE, text.read_text("utf-8")

    def _course(self, conn: Connection, course: str | None) -> tuple[int, str | None]:
        q = select(CourseRecord.id, CourseRecord.survey_state)
        if course is not None:
            q = q.where(CourseRecord.key == course)
        rows = conn.execute(q.limit(2)).all()
        if len(rows) != 1:
            key = course or self._store.courses.get_course(None).key  # the store's own "no/several courses" message
            raise NotFound(f"no course {key!r}", where="course", fix="see gpuseat course list")
        return int(rows[0][0]), rows[0][1]

    def _participant(self, conn: Connection, course_id: int, participant: str) -> int:
        pid = conn.scalar(
            select(Participant.id).where(Participant.course_id == course_id, Participant.key == participant)
        )
        if pid is None:
            raise NotFound(f"no participant {participant!r}", where="participant", fix="see gpuseat roster")
        return int(pid)

    def _survey(self, conn: Connection, course_id: int) -> tuple[int, str, str]:
        """(survey id, template key, template text), the survey row made with the default template if absent."""
        row = conn.execute(
            select(Survey.id, Survey.template_key, Survey.template_text).where(Survey.course_id == course_id)
        ).first()
        if row is None:
            key, text = self._default
            made = conn.execute(
                insert(Survey).values(course_id=course_id, template_key=key, template_text=text)
            ).inserted_primary_key
            assert made is not None
            return int(made[0]), key, text
        return int(row[0]), row[1], row[2]

    def template(self, course: str | None) -> tuple[str, str]:
        """(key, TOML text) of the course's survey template (the default until one is stored).

        A read only: a participant's page shows the survey without waiting for another writer (the
        survey row is made by the first write that needs it).
        """
        with self._database.engine.connect() as conn:
            cid = self._course(conn, course)[0]
            row = conn.execute(select(Survey.template_key, Survey.template_text).where(Survey.course_id == cid)).first()
        return self._default if row is None else (row[0], row[1])

    def set_template(self, course: str | None, key: str, text: str, *, actor: str = "gpuseat") -> None:
        """Use another template; refused once anyone has answered."""
        with self._database.writer.begin() as conn:  # SQLite: take the write lock first, never upgrade
            cid, _ = self._course(conn, course)
            sid, _, _ = self._survey(conn, cid)
            answered = conn.scalar(select(func.count()).where(SurveyResponse.survey_id == sid))
            if answered:
                raise InputError(
                    f"{answered} participants already answered this survey",
                    where="template",
                    fix="change the template before opening the survey",
                )
            conn.execute(update(Survey).where(Survey.id == sid).values(template_key=key, template_text=text))
            course_key = conn.scalar(select(CourseRecord.key).where(CourseRecord.id == cid))
            conn.execute(
                insert(Event).values(
                    at=datetime.now(UTC),
                    course_key=course_key,
                    actor=actor[:128],
                    action="survey.template",
                    detail={"template": key},
                )
            )

    def state(self, course: str | None) -> str | None:
        """``open``, ``closed`` or None (never opened)."""
        with self._database.engine.connect() as conn:
            return self._course(conn, course)[1]

    def stamp(self, course: str | None, state: str) -> None:
        """Record when the survey was opened or closed (the state itself is the course's)."""
        now = datetime.now(UTC)
        with self._database.writer.begin() as conn:  # SQLite: writers queue for the lock, never fail at once
            cid, _ = self._course(conn, course)
            sid, _, _ = self._survey(conn, cid)
            values = {"opened_at": now} if state == OPEN else {"closed_at": now}
            conn.execute(update(Survey).where(Survey.id == sid).values(**values))

    def submit(
        self, course: str | None, participant: str, check: Callable[[str, str], dict[str, Any]]
    ) -> dict[str, Any]:
        """Store the answers ``check(template key, template text)`` returns, replacing earlier ones; the
        survey must be open. One transaction: the template checked is the one stored."""
        now = datetime.now(UTC)
        with self._database.writer.begin() as conn:  # SQLite: take the write lock first, never upgrade
            cid, state = self._course(conn, course)
            if state != OPEN:
                raise InputError("the survey is not open", where="survey", fix="ask the organizer to open it")
            pid = self._participant(conn, cid, participant)
            sid, key, text = self._survey(conn, cid)
            answers = check(key, text)
            values = {
                "survey_id": sid,
                "participant_id": pid,
                "answers": answers,
                "submitted_at": now,
                "updated_at": now,
            }
            upsert = self._database.insert(SurveyResponse)
            conn.execute(
                upsert.values(**values).on_conflict_do_update(
                    index_elements=["survey_id", "participant_id"], set_={"answers": answers, "updated_at": now}
                )
            )
        return answers

    def response(self, course: str | None, participant: str) -> dict[str, Any] | None:
        """A participant's stored answers, if any."""
        with self._database.engine.connect() as conn:
            cid, _ = self._course(conn, course)
            pid = self._participant(conn, cid, participant)
            found = conn.scalar(
                select(SurveyResponse.answers)
                .join(Survey, Survey.id == SurveyResponse.survey_id)
                .where(Survey.course_id == cid, SurveyResponse.participant_id == pid)
            )
        return dict(found) if found is not None else None

    def answers(self, course: str | None) -> tuple[str, str, str | None, list[dict[str, Any]]]:
        """(template key, template text, state, every response's answers in order of first submission).

        A read only (the organizer's pages and ``survey report`` never wait for another writer): a
        course whose survey row is not made yet has the default template and no answers.
        """
        with self._database.engine.connect() as conn:
            cid, state = self._course(conn, course)
            survey = conn.execute(
                select(Survey.id, Survey.template_key, Survey.template_text).where(Survey.course_id == cid)
            ).first()
            if survey is None:
                return *self._default, state, []
            sid, key, text = survey
            rows = conn.scalars(
                select(SurveyResponse.answers).where(SurveyResponse.survey_id == sid).order_by(SurveyResponse.id)
            ).all()
        return key, text, state, [dict(r) for r in rows]

    def count(self, course: str | None = None) -> int:
        """Stored responses of a course."""
        with self._database.engine.connect() as conn:
            cid, _ = self._course(conn, course)
            q = (
                select(func.count())
                .select_from(SurveyResponse)
                .join(Survey, Survey.id == SurveyResponse.survey_id)
                .where(Survey.course_id == cid)
            )
            return int(conn.scalar(q) or 0)
