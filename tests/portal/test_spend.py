"""Cost so far: re-pricing a plan's lines for the part of the schedule that has happened."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.spend import spend, spend_curve
from gpuseat.services.planning import load_course, plan_course

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CATALOG = load_catalog()


@pytest.fixture(scope="module", params=["course-2016.toml", "course-lab-hours.toml"])
def planned(request):
    path = EXAMPLES / request.param
    return load_course(path), plan_course(path, CATALOG, alternatives=4).to_dict()["options"]


def test_whole_course_costs_what_the_plan_says(planned):
    course, options = planned
    end = course.schedule.span()[1].replace(tzinfo=UTC)
    for option in options:
        s = spend(course, option, CATALOG, end)
        assert s.planned_usd == pytest.approx(option["total_usd"], abs=0.01)
        assert s.to_date_usd == pytest.approx(option["total_usd"], abs=0.01 * len(option["lines"]))
        before = spend(course, option, CATALOG, end - timedelta(days=400))
        assert before.to_date_usd == 0


def test_cloud_hours_accrue_with_the_schedule():
    course = load_course(EXAMPLES / "course-2016.toml")  # 16 × g2.2xlarge, 24/7 for 15 days at 0.65 $/h
    option = {"lines": [{"offer": "aws:g2.2xlarge", "item": "instance hours", "count": 16, "usd": 3744.0}]}
    start = datetime(2016, 6, 6, tzinfo=UTC)
    assert spend(course, option, CATALOG, start + timedelta(hours=10)).to_date_usd == pytest.approx(0.65 * 10 * 16)
    curve = spend_curve(course, option, CATALOG, points=15)
    assert [round(v) for _, v in curve][:3] == [0, round(0.65 * 24 * 16), round(0.65 * 48 * 16)]
    assert curve[-1][1] == pytest.approx(3744.0)


@given(st.integers(0, 20 * 24))
def test_spend_never_decreases(hours):
    course = load_course(EXAMPLES / "course-lab-hours.toml")
    option = {
        "lines": [
            {"offer": "aws:g4dn.xlarge", "item": "instance hours", "count": 14, "usd": 1.0},
            {"offer": "aws:g4dn.xlarge", "item": "disk", "count": 14, "usd": 1.0},
        ]
    }
    t = datetime(2026, 3, 2, tzinfo=UTC) + timedelta(hours=hours)
    assert (
        spend(course, option, CATALOG, t).to_date_usd
        <= spend(course, option, CATALOG, t + timedelta(hours=1)).to_date_usd
    )
