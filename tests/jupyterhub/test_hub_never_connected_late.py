"""``never_connected_hours`` set on day 3 on a JupyterHub course (the portal's ``/course/settings``): counted from
then, not from getting the seat (counted from day 1, the next pass stopped every holder without a use since).
A use of the hub since getting the seat still counts. Against the stand-in hub, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hubcourse import make_course
from sqlalchemy import create_engine, text
from test_hub_engine_plan import TOKEN, engine_for
from test_hub_idle import ActiveHub, plan_steps

from gpuseat.web import course_settings
from pg_schema import db_url

pytestmark = pytest.mark.xdist_group(name="jupyterhub")
__all__ = ["db_url"]  # the ``url`` fixture
PEOPLE = ["ada", "ben", "cy"]


def test_a_rule_set_on_day_three_stops_a_hub_seat_only_hours_after_that(url, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HUB_TEST_TOKEN", TOKEN)
    hub = ActiveHub(*PEOPLE)
    store = make_course(url, tmp_path, key="lab", people=PEOPLE, seats=3, assign=2)
    try:
        for seat in store.seats.seats("lab"):
            store.seats.set_seat_state("lab", seat.key, seat.state, engine="jupyterhub", reason="a hub seat")
        store.agents.set_engine_settings("lab", "jupyterhub", {"hub_url": "https://hub.test"}, actor="test")
        day1 = store.requests.now() - timedelta(days=2)
        db = create_engine(url)
        with db.begin() as conn:  # ada and ben got their seats on day 1
            conn.execute(text("UPDATE assignments SET valid_from = :t WHERE valid_to IS NULL"), {"t": day1})
        db.dispose()
        hub.used("ben", day1 + timedelta(hours=1))  # ben used his server on day 1; ada never
        course = store.courses.course_file("lab")  # day 3: the organizer sets the rule on /course/settings
        edit = course_settings.parse(course, {"policy.never_connected_hours": "6"})
        text_, _checked = course_settings.rewritten(store.courses.course_text("lab"), edit)
        changed = course_settings.changes(course_settings.current(course), edit)
        store.courses.set_course_text("lab", text_, changes=changed, actor="organizer")
        rule = store.requests.policy_set_at("lab", "never_connected_hours")["ada"]
        store.seats.assign("lab", "cy", store.seats.seats("lab")[2].key)  # cy: seated an hour after the rule
        db = create_engine(url)
        with db.begin() as conn:
            conn.execute(text("UPDATE assignments SET valid_from = :t WHERE valid_from > :d"),
                         {"t": rule + timedelta(hours=1), "d": day1})  # fmt: skip
        db.dispose()
        seats = {who: store.seats.seat_of("lab", who).key for who in PEOPLE}
        engine = engine_for(store, hub)

        assert plan_steps(engine, store, rule + timedelta(minutes=1))[1] == [("seat.connected", seats["ben"], "ben")]
        assert plan_steps(engine, store, rule + timedelta(hours=5, minutes=59))[1] == [
            ("seat.connected", seats["ben"], "ben")
        ]
        changes, steps = plan_steps(engine, store, rule + timedelta(hours=6, minutes=1))
        assert ("seat.stop", seats["ada"], "ada") in steps and ("seat.stop", seats["cy"], "cy") not in steps, steps
        said = {s.participant: s.data["reason"] for s in changes.ordered() if s.action == "seat.stop"}
        assert said == {"ada": "never connected: ada did not log in within 6 h of the rule being set"}
        later = plan_steps(engine, store, rule + timedelta(hours=7, minutes=1))[0]  # from getting her seat
        said = {s.participant: s.data["reason"] for s in later.ordered() if s.action == "seat.stop"}
        assert said["cy"] == "never connected: cy did not log in within 6 h of getting the seat"
    finally:
        store.close()
