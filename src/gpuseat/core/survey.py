"""Course surveys: the template (TOML), checking one participant's answers, and the results (pure).

A template lists questions of four kinds: ``scale`` (an integer from ``min`` to ``max``), ``choice``
(one of ``choices``, or free text when ``other`` is allowed), ``multi-choice`` (several) and ``text``.
A scale question marked ``nps = true`` (0–10) also gives the Net Promoter Score: the share of
promoters (9–10) minus the share of detractors (0–6), in points from −100 to 100.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from gpuseat.errors import InputError
from gpuseat.safe_text import has_control

QuestionKind = Literal["scale", "choice", "multi-choice", "text"]
OTHER = "other"
MAX_TEXT = 2000  # characters in one free-text answer
Z95 = 1.959963984540054


def _plain_text(value: str, *, one_line: bool) -> str:
    """``value`` when it holds no control character (texts reach the organizer's terminal in ``gpuseat report``)."""
    if has_control(value):
        raise ValueError("control characters (escape sequences, bidirectional overrides) in a text")
    if one_line and ("\n" in value or "\r" in value):
        raise ValueError("a line break in a text that is one line")
    return value


class Question(BaseModel):
    """One question of a survey template."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")
    kind: QuestionKind
    text: str = Field(min_length=1, max_length=500)
    required: bool = False
    min: int | None = Field(None, ge=0, le=100)
    max: int | None = Field(None, ge=1, le=100)
    low_label: str = ""
    high_label: str = ""
    choices: tuple[str, ...] = ()
    other: bool = False
    nps: bool = False

    @field_validator("text", "low_label", "high_label", "choices")
    @classmethod
    def _plain(cls, value: Any, info: ValidationInfo) -> Any:
        for text in value if isinstance(value, tuple) else (value,):
            _plain_text(text, one_line=info.field_name != "text")
        return value

    @model_validator(mode="after")
    def _shape(self) -> Question:
        if self.kind == "scale":
            if self.min is None or self.max is None or self.min >= self.max:
                raise ValueError(f"question {self.id!r}: a scale needs min < max")
            if self.nps and (self.min, self.max) != (0, 10):
                raise ValueError(f"question {self.id!r}: an NPS question is a 0–10 scale")
        elif self.nps:
            raise ValueError(f"question {self.id!r}: only a scale question can be the NPS question")
        if self.kind in ("choice", "multi-choice"):
            if not self.choices:
                raise ValueError(f"question {self.id!r}: give 'choices'")
            if len(set(self.choices)) != len(self.choices) or OTHER in self.choices:
                raise ValueError(f"question {self.id!r}: choices must be unique and not {OTHER!r}")
        return self

    @property
    def scale_values(self) -> range:
        """Every allowed value of a scale question."""
        assert self.min is not None and self.max is not None
        return range(self.min, self.max + 1)


class Template(BaseModel):
    """A survey template file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")
    title: str = Field(min_length=1, max_length=200)
    intro: str = ""
    source: str
    as_of: str
    question: tuple[Question, ...] = Field(min_length=1)

    @field_validator("title", "intro")
    @classmethod
    def _plain(cls, value: str, info: ValidationInfo) -> str:
        return _plain_text(value, one_line=info.field_name == "title")

    @model_validator(mode="after")
    def _ids(self) -> Template:
        ids = [q.id for q in self.question]
        if len(set(ids)) != len(ids):
            raise ValueError("question ids must be unique")
        if sum(q.nps for q in self.question) > 1:
            raise ValueError("at most one question can be the NPS question")
        return self

    @property
    def nps_question(self) -> Question | None:
        """The question that gives the NPS, if any."""
        return next((q for q in self.question if q.nps), None)


def _clean_text(value: str, where: str) -> str:
    text = value.replace("\x00", "").replace("\r\n", "\n").replace("\r", "\n").strip()  # a textarea sends CR LF
    if has_control(text):  # the organizer reads answers in a terminal (gpuseat report)
        raise InputError("control characters in the answer", where=where, fix="type plain text")
    if len(text) > MAX_TEXT:
        raise InputError(f"answer is {len(text)} characters long", where=where, fix=f"keep it under {MAX_TEXT}")
    return text


def parse_answers(template: Template, form: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """Check a submitted form (field ``q_<id>``, and ``q_<id>_other`` for free text) into answers.

    Unanswered optional questions are left out. Every problem is an :class:`InputError` naming the field.
    """
    answers: dict[str, Any] = {}
    for q in template.question:
        name = f"q_{q.id}"
        values = [v for v in form.get(name, ()) if v != ""]
        other = _clean_text(" ".join(form.get(f"{name}_other", ())), f"field {name}_other")
        where = f"field {name} ({q.text})"
        if q.kind == "scale":
            if len(values) > 1:
                raise InputError("more than one value", where=where, fix="pick one")
            if values:
                raw = values[0].strip()
                # the digits 0-9 only (isdigit() also takes "²" and "①", \d and int() "٣" and "３", lstrip "--3")
                if not re.fullmatch(r"-?[0-9]{1,3}", raw) or int(raw) not in q.scale_values:
                    raise InputError(
                        f"{raw[:20]!r} is not a whole number from {q.min} to {q.max}",
                        where=where,
                        fix=f"pick a value from {q.min} to {q.max}",
                    )
                answers[q.id] = int(raw)
        elif q.kind in ("choice", "multi-choice"):
            unknown = [v for v in values if v not in q.choices and v != OTHER]
            if unknown:
                raise InputError(
                    f"{unknown[0][:40]!r} is not one of the choices", where=where, fix="pick a listed choice"
                )
            if q.kind == "choice" and len(values) > 1:
                raise InputError("more than one choice", where=where, fix="pick one")
            if OTHER in values or (other and not values):
                if not q.other:
                    raise InputError("this question has no 'other' answer", where=where, fix="pick a listed choice")
                if not other:
                    raise InputError("'other' chosen but left empty", where=f"{name}_other", fix="write your answer")
            picked = sorted({v for v in values if v != OTHER}, key=q.choices.index)
            if q.kind == "choice":
                if picked:
                    answers[q.id] = picked[0]
                elif other:
                    answers[q.id] = {OTHER: other}
            elif picked or other:
                answers[q.id] = {"choices": picked, **({OTHER: other} if other else {})}
        else:
            text = _clean_text(" ".join(values), where)
            if text:
                answers[q.id] = text
        if q.required and q.id not in answers:
            raise InputError("this question needs an answer", where=where, fix="answer it, then send again")
    return answers


@dataclass(frozen=True)
class Nps:
    """Net Promoter Score with its 95 % interval (points, −100..100)."""

    n: int
    promoters: int
    passives: int
    detractors: int
    score: float
    low: float
    high: float


def nps(scores: Sequence[int]) -> Nps | None:
    """NPS of 0–10 answers; None without answers.

    The interval is a Wald interval on the per-answer score (+1 promoter, 0 passive, −1 detractor)
    with three pseudo-answers added (¾ promoter, ¾ detractor, 1½ passive), so it stays meaningful for
    a 16-person course, where all-promoter answers would otherwise give a zero-width interval.
    """
    n = len(scores)
    if n == 0:
        return None
    p = sum(1 for s in scores if s >= 9)
    d = sum(1 for s in scores if s <= 6)
    score = 100.0 * (p - d) / n
    na = n + 3
    pa, da = (p + 0.75) / na, (d + 0.75) / na
    centre = pa - da
    se = math.sqrt(max(0.0, pa + da - centre**2) / na)
    low, high = max(-1.0, centre - Z95 * se), min(1.0, centre + Z95 * se)
    return Nps(n, p, n - p - d, d, score, 100 * low, 100 * high)


@dataclass
class QuestionResult:
    """The results of one question."""

    question: Question
    answered: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # scale value or choice → answers
    others: list[str] = field(default_factory=list)  # free text ("other" answers and text questions)
    mean: float | None = None
    nps: Nps | None = None


def results(template: Template, responses: Sequence[Mapping[str, Any]]) -> list[QuestionResult]:
    """Distribution, mean and free-text answers per question (answers that no longer fit are skipped)."""
    out = []
    for q in template.question:
        r = QuestionResult(q)
        if q.kind == "scale":
            r.counts = {str(v): 0 for v in q.scale_values}
        elif q.kind != "text":
            r.counts = {c: 0 for c in (*q.choices, *((OTHER,) if q.other else ()))}
        values: list[int] = []
        for resp in responses:
            a = resp.get(q.id)
            if a is None:
                continue
            if q.kind == "scale" and isinstance(a, int) and str(a) in r.counts:
                values.append(a)
                r.counts[str(a)] += 1
            elif q.kind == "choice" and isinstance(a, str) and a in r.counts:
                r.counts[a] += 1
            elif q.kind in ("choice", "multi-choice") and isinstance(a, dict):
                for c in a.get("choices", []):
                    if c in r.counts:
                        r.counts[c] += 1
                if a.get(OTHER):
                    r.counts[OTHER] = r.counts.get(OTHER, 0) + 1
                    r.others.append(str(a[OTHER]))
            elif q.kind == "text" and isinstance(a, str):
                r.others.append(a)
            else:
                continue
            r.answered += 1
        if values:
            r.mean = sum(values) / len(values)
        if q.nps:
            r.nps = nps(values)
        out.append(r)
    return out


def answer_text(q: Question, answer: Any) -> str:
    """One answer as text (CSV export, terminal report)."""
    if answer is None:
        return ""
    if isinstance(answer, dict):
        parts = [*answer.get("choices", [])]
        if answer.get(OTHER):
            parts.append(f"other: {answer[OTHER]}")
        return "; ".join(parts)
    return str(answer)
