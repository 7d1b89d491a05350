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
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuseat.core.survey import QuestionResult, Template, answer_text, parse_answers, results
from gpuseat.errors import InputError
from gpuseat.files import read_text, validate
from gpuseat.safe_text import csv_cell
from gpuseat.store.survey import CLOSED, OPEN

if TYPE_CHECKING:
    from gpuseat.store import CourseStore


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
    except (tomllib.TOMLDecodeError, RecursionError) as exc:  # RecursionError: nested too deeply
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
            where="template",
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
    """Surveys of the courses in one store: templates parsed and answers checked here, rows in
    :class:`gpuseat.store.survey.SurveyRows`."""

    def __init__(self, store: CourseStore) -> None:
        self.store = store
        self._rows = store.survey

    def set_template(self, course: str | None, name: str) -> Template:
        """Use a bundled template or a template file; refused once anyone has answered."""
        text = template_text(name)
        template = parse_template(text, where=name)
        self._rows.set_template(course, template.key, text)
        return template

    def template(self, course: str | None) -> Template:
        """The course's survey template (the default one until another is set)."""
        key, text = self._rows.template(course)
        return parse_template(text, where=f"survey template {key}")

    def state(self, course: str | None) -> str | None:
        """``open``, ``closed`` or None (never opened)."""
        return self._rows.state(course)

    def set_state(self, course: str | None, state: str, *, actor: str = "gpuseat") -> None:
        """Open or close the survey (answers stay; re-opening lets participants edit again)."""
        if state not in (OPEN, CLOSED):
            raise InputError(f"unknown survey state {state!r}", where="state", fix="use open or close")
        self._rows.stamp(course, state)
        view = self.store.courses.get_course(course)
        self.store.courses.set_survey_state(view.key, state, actor=actor)

    def submit(self, course: str | None, participant: str, form: Mapping[str, Sequence[str]]) -> dict[str, Any]:
        """Check and store one participant's answers (replacing their earlier ones); the survey must be open."""

        def check(key: str, text: str) -> dict[str, Any]:
            return parse_answers(parse_template(text, where=f"survey template {key}"), form)

        return self._rows.submit(course, participant, check)

    def response(self, course: str | None, participant: str) -> dict[str, Any] | None:
        """A participant's stored answers, if any."""
        return self._rows.response(course, participant)

    def _answers(self, course: str | None) -> tuple[Template, str | None, list[dict[str, Any]]]:
        key, text, state, answers = self._rows.answers(course)
        return parse_template(text, where=f"survey template {key}"), state, answers

    def results(self, course: str | None) -> SurveyResults:
        """Distributions, means, NPS and free text of the course's survey."""
        template, state, answers = self._answers(course)
        return SurveyResults(template, state, len(answers), results(template, answers))

    def export_csv(self, course: str | None) -> str:
        """One row per response (numbered, without names: the survey is anonymous to readers of the file); every
        cell passes :func:`gpuseat.safe_text.csv_cell`, the formula rule of the portal's other downloads."""
        template, _, answers = self._answers(course)
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["response", *(csv_cell(q.id) for q in template.question)])
        for n, a in enumerate(answers, start=1):
            writer.writerow([n, *(csv_cell(answer_text(q, a.get(q.id)), one_line=False) for q in template.question)])
        return out.getvalue()

    def count(self, course: str | None = None) -> int:
        """Stored responses of a course: the benchmark and the durability test count them."""
        return self._rows.count(course)
