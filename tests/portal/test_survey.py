"""Survey templates, answer checking, NPS, and the survey store on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuseat.core.roster import RosterText
from gpuseat.core.survey import nps, parse_answers
from gpuseat.errors import InputError, NotFound
from gpuseat.services.survey import SurveyService, parse_template, template_text
from gpuseat.store import open_store

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
T2016 = parse_template(template_text("course-2016"), where="course-2016")


def full_form(score: int = 9, **extra):
    form = {"q_expectations": ["8"], "q_format": ["7"], "q_recommend": [str(score)]}
    form.update(extra)
    return form


def test_default_template_is_the_2016_survey():
    kinds = [(q.id, q.kind, q.min, q.max) for q in T2016.question]
    assert kinds == [
        ("expectations", "scale", 1, 10),
        ("result", "choice", None, None),
        ("apply", "multi-choice", None, None),
        ("format", "scale", 1, 10),
        ("recommend", "scale", 0, 10),
    ]
    assert T2016.nps_question is not None and T2016.nps_question.id == "recommend"
    assert "2 in-person days with labs" in T2016.question[3].text


def test_parse_answers_accepts_choices_other_and_multi():
    first = T2016.question[1].choices[0]
    a = parse_answers(
        T2016,
        full_form(q_result=[first], q_apply=["In research or study", "other"], q_apply_other=["teaching"]),
    )
    assert a == {
        "expectations": 8,
        "result": first,
        "apply": {"choices": ["In research or study"], "other": "teaching"},
        "format": 7,
        "recommend": 9,
    }
    assert parse_answers(T2016, full_form(q_result=["other"], q_result_other=["a job"]))["result"] == {"other": "a job"}


@pytest.mark.parametrize(
    ("form", "field"),
    [
        (full_form(11), "q_recommend"),
        (full_form(q_expectations=["0"]), "q_expectations"),
        (full_form(q_expectations=["1e3"]), "q_expectations"),
        (full_form(q_format=["5", "6"]), "q_format"),
        (full_form(q_result=["made up"]), "q_result"),
        (full_form(q_result=["other"]), "q_result_other"),
        ({"q_expectations": ["8"], "q_format": ["7"]}, "q_recommend"),
        (full_form(q_apply_other=["x" * 3000]), "q_apply_other"),
    ],
)
def test_bad_answers_name_the_field(form, field):
    with pytest.raises(InputError) as err:
        parse_answers(T2016, form)
    assert err.value.where.startswith(f"field {field}") or err.value.where == field


def test_template_errors_name_the_field(tmp_path):
    bad = template_text("course-2016").replace("min = 0", "min = 3", 1)
    with pytest.raises(InputError) as err:
        parse_template(bad, where="t.toml")
    assert "NPS" in err.value.message and "t.toml" in err.value.message


@given(st.lists(st.integers(0, 10), min_size=1, max_size=300))
def test_nps_is_promoters_minus_detractors_inside_its_interval(scores):
    r = nps(scores)
    p = sum(s >= 9 for s in scores) / len(scores)
    d = sum(s <= 6 for s in scores) / len(scores)
    assert r.score == pytest.approx(100 * (p - d))
    assert -100 <= r.low < r.high <= 100
    assert r.promoters + r.passives + r.detractors == len(scores)
    # the pseudo-answers pull the centre towards 0: the interval always holds the shrunk estimate
    assert r.low <= 100 * (r.promoters - r.detractors) / (len(scores) + 3) <= r.high


def test_nps_interval_narrows_with_more_answers():
    small, big = nps([10, 9, 7, 3] * 4), nps([10, 9, 7, 3] * 100)
    assert small.score == big.score == 25.0
    assert big.high - big.low < small.high - small.low


def make_course(url: str, participants: int = 3):
    store = open_store(url, create=True)
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="c")
    roster = "name,email\n" + "".join(f"P {i},p{i}@example.org\n" for i in range(participants))
    store.roster.import_roster("c", RosterText(roster, where="roster.csv"))
    return store, "c", [p.key for p in store.roster.participants("c")]


def test_survey_store_one_editable_response_per_participant(db_url):
    store, cid, pids = make_course(db_url)
    svc = SurveyService(store)
    with pytest.raises(InputError, match="not open"):
        svc.submit(cid, pids[0], full_form())
    svc.set_state(cid, "open")
    assert store.courses.get_course(cid).survey_state == "open"
    svc.submit(cid, pids[0], full_form(3))
    svc.submit(cid, pids[0], full_form(10))  # edited: still one row
    svc.submit(cid, pids[1], full_form(6, q_result=["other"], q_result_other=["=cmd|' /C calc'!A0"]))
    assert svc.count(cid) == 2 and svc.response(cid, pids[0])["recommend"] == 10
    res = svc.results(cid)
    rec = next(r for r in res.questions if r.question.id == "recommend")
    assert rec.counts["10"] == 1 and rec.counts["6"] == 1 and rec.counts["3"] == 0
    assert rec.nps.score == 0.0 and rec.mean == 8.0
    csv_text = svc.export_csv(cid)
    cells = [c for row in csv.reader(io.StringIO(csv_text)) for c in row]
    assert not any(c.startswith(("=", "+", "-", "@")) for c in cells) and pids[0] not in csv_text
    with pytest.raises(NotFound):
        svc.submit(cid, "nobody", full_form())
    svc.set_state(cid, "closed")
    with pytest.raises(InputError, match="not open"):
        svc.submit(cid, pids[2], full_form())
    with pytest.raises(InputError, match="already answered"):
        svc.set_template(cid, "course-2016")
    assert svc.results(cid).to_dict()["state"] == "closed"
    store.close()
