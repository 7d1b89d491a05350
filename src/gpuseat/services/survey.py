"""The course survey in the store: template per course, open/close, one editable response per participant.

A response is written in one transaction with an upsert (``INSERT … ON CONFLICT DO UPDATE``), so two
submissions of the same participant never make two rows, and a submission acknowledged to the browser
is committed (SQLite in WAL mode, PostgreSQL) before the answer is sent.
"""

from __future__ import annotations

import csv
import io
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from gpuseat.core.survey import QuestionResult, Template, answer_text, parse_answers, results
from gpuseat.db import immediate
from gpuseat.db.models import Course, Participant, Survey, SurveyResponse
from gpuseat.errors import InputError, NotFound
from gpuseat.files import read_text, validate

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from gpuseat.services.courses import CourseStore

DEFAULT_TEMPLATE = "course-2016"
OPEN, CLOSED = "open", "closed"


def bundled_templates() -> list[str]:
    """Keys of the templates shipped with gpuseat."""
    folder = resources.files("gpuseat.catalog").joinpath("data", "surveys")
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml"))


@lru_cache(maxsize=64)
def parse_template(text: str, *, where: str) -> Template:
    """A template from its TOML text; errors name the file and field (parsed once per text: it is read
    on every submission)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", where=where, fix="fix the TOML syntax") from None
    return validate(Template, data, where=where)


def template_text(name: str) -> str:
    """The TOML text of a bundled template (by key) or of a template file (by path)."""
    if name in bundled_templates():
        return resources.files("gpuseat.catalog").joinpath("data", "surveys", f"{name}.toml").read_text("utf-8")
    path = Path(name)
    if path.suffix != ".toml":
        raise InputError(
            f"unknown survey template {name!r}",
            where="--template",
            fix=f"use one of {', '.join(bundled_templates())} or a path to a .toml file",
        )
    return read_text(path)


@dataclass(frozen=True)
class SurveyResults:
    """Everything the portal, the report and ``gpuseat survey report`` show."""

    template: Template
    state: str | None
    responses: int
    questions: list[QuestionResult]

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (``survey report --format json``)."""
        return {
            "template": self.template.key,
            "state": self.state,
            "responses": self.responses,
            "questions": [
                {
                    "id": r.question.id,
                    "kind": r.question.kind,
                    "text": r.question.text,
                    "answered": r.answered,
                    "counts": r.counts,
                    "mean": r.mean,
                    "others": r.others,
                    "nps": None
                    if r.nps is None
                    else {
                        "score": r.nps.score,
                        "low": r.nps.low,
                        "high": r.nps.high,
                        "promoters": r.nps.promoters,
                        "passives": r.nps.passives,
                        "detractors": r.nps.detractors,
                    },
                }
                for r in self.questions
            ],
        }


class SurveyService:
    """Surveys of the courses in one store; courses and participants are named by key, as everywhere."""

    def __init__(self, store: CourseStore) -> None:
        self.store = store
        self.engine = store.engine

    def _course(self, conn: Connection, course: str | None) -> tuple[int, str | None]:
        q = select(Course.id, Course.survey_state)
        if course is not None:
            q = q.where(Course.key == course)
        rows = conn.execute(q.limit(2)).all()
        if len(rows) != 1:
            key = course or self.store.get_course(None).key  # the store's own "no/several courses" message
            raise NotFound(f"no course {key!r}", where="--course", fix="see gpuseat course list")
        return int(rows[0][0]), rows[0][1]

    def _participant(self, conn: Connection, course_id: int, participant: str) -> int:
        pid = conn.scalar(
            select(Participant.id).where(Participant.course_id == course_id, Participant.key == participant)
        )
        if pid is None:
            raise NotFound(f"no participant {participant!r}", where="participant", fix="see gpuseat roster")
        return int(pid)

    def _survey(self, conn: Connection, course_id: int) -> tuple[int, Template]:
        row = conn.execute(select(Survey.id, Survey.template_text).where(Survey.course_id == course_id)).first()
        if row is None:
            text = template_text(DEFAULT_TEMPLATE)
            made = conn.execute(
                insert(Survey).values(course_id=course_id, template_key=DEFAULT_TEMPLATE, template_text=text)
            ).inserted_primary_key
            assert made is not None
            return int(made[0]), parse_template(text, where=DEFAULT_TEMPLATE)
        return int(row[0]), parse_template(row[1], where=f"survey of course {course_id}")

    def set_template(self, course: str | None, name: str) -> Template:
        """Use a bundled template or a template file; refused once anyone has answered."""
        text = template_text(name)
        template = parse_template(text, where=name)
        with immediate(self.engine).begin() as conn:  # SQLite: take the write lock first, never upgrade
            cid, _ = self._course(conn, course)
            sid, _ = self._survey(conn, cid)
            answered = conn.scalar(select(func.count()).where(SurveyResponse.survey_id == sid))
            if answered:
                raise InputError(
                    f"{answered} participants already answered this survey",
                    where="--template",
                    fix="change the template before opening the survey",
                )
            conn.execute(update(Survey).where(Survey.id == sid).values(template_key=template.key, template_text=text))
        return template

    def template(self, course: str | None) -> Template:
        """The course's survey template (the default one until another is set)."""
        with immediate(self.engine).begin() as conn:  # may create the survey row
            return self._survey(conn, self._course(conn, course)[0])[1]

    def state(self, course: str | None) -> str | None:
        """``open``, ``closed`` or None (never opened)."""
        with self.engine.connect() as conn:
            return self._course(conn, course)[1]

    def set_state(self, course: str | None, state: str, *, actor: str = "gpuseat") -> None:
        """Open or close the survey (answers stay; re-opening lets participants edit again)."""
        if state not in (OPEN, CLOSED):
            raise InputError(f"unknown survey state {state!r}", where="state", fix="use open or close")
        now = datetime.now(UTC)
        with immediate(self.engine).begin() as conn:  # SQLite: writers queue for the lock, never fail at once
            cid, _ = self._course(conn, course)
            sid, _ = self._survey(conn, cid)
            stamp = {"opened_at": now} if state == OPEN else {"closed_at": now}
            conn.execute(update(Survey).where(Survey.id == sid).values(**stamp))
        view = self.store.get_course(course)
        self.store.set_survey_state(view.key, state, actor=actor)

    def submit(self, course: str | None, participant: str, form: Mapping[str, Sequence[str]]) -> dict[str, Any]:
        """Check and store one participant's answers (replacing their earlier ones); the survey must be open."""
        now = datetime.now(UTC)
        with immediate(self.engine).begin() as conn:  # SQLite: take the write lock first, never upgrade
            cid, state = self._course(conn, course)
            if state != OPEN:
                raise InputError("the survey is not open", where="survey", fix="ask the organizer to open it")
            pid = self._participant(conn, cid, participant)
            sid, template = self._survey(conn, cid)
            answers = parse_answers(template, form)
            values = {
                "survey_id": sid,
                "participant_id": pid,
                "answers": answers,
                "submitted_at": now,
                "updated_at": now,
            }
            upsert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(SurveyResponse)
            conn.execute(
                upsert.values(**values).on_conflict_do_update(
                    index_elements=["survey_id", "participant_id"],
                    set_={"answers": answers, "updated_at": now},
                )
            )
        return answers

    def response(self, course: str | None, participant: str) -> dict[str, Any] | None:
        """A participant's stored answers, if any."""
        with self.engine.connect() as conn:
            cid, _ = self._course(conn, course)
            pid = self._participant(conn, cid, participant)
            found = conn.scalar(
                select(SurveyResponse.answers)
                .join(Survey, Survey.id == SurveyResponse.survey_id)
                .where(Survey.course_id == cid, SurveyResponse.participant_id == pid)
            )
        return dict(found) if found is not None else None

    def _answers(self, course: str | None) -> tuple[Template, str | None, list[dict[str, Any]]]:
        with self.engine.begin() as conn:
            cid, state = self._course(conn, course)
            sid, template = self._survey(conn, cid)
            rows = conn.scalars(
                select(SurveyResponse.answers).where(SurveyResponse.survey_id == sid).order_by(SurveyResponse.id)
            ).all()
        return template, state, [dict(r) for r in rows]

    def results(self, course: str | None) -> SurveyResults:
        """Distributions, means, NPS and free text of the course's survey."""
        template, state, answers = self._answers(course)
        return SurveyResults(template, state, len(answers), results(template, answers))

    def export_csv(self, course: str | None) -> str:
        """One row per response (numbered, without names: the survey is anonymous to readers of the file)."""
        template, _, answers = self._answers(course)
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["response", *(q.id for q in template.question)])
        for n, a in enumerate(answers, start=1):
            writer.writerow([n, *(_safe_cell(answer_text(q, a.get(q.id))) for q in template.question)])
        return out.getvalue()

    def count(self, course: str | None = None) -> int:
        """Stored responses of a course: the benchmark and the durability test count them."""
        with self.engine.connect() as conn:
            cid, _ = self._course(conn, course)
            q = (
                select(func.count())
                .select_from(SurveyResponse)
                .join(Survey, Survey.id == SurveyResponse.survey_id)
                .where(Survey.course_id == cid)
            )
            return int(conn.scalar(q) or 0)


def _safe_cell(text: str) -> str:
    """Free text that a spreadsheet would run as a formula gets a leading quote (CSV injection)."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
