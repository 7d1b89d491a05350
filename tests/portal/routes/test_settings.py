"""The course settings router, ``/course/settings``: the organizer edits the course's ``[policy]`` and a
group's overrides with the course file's own checks.

Bad input (negative hours, 150 %, not a number, minutes with a fraction) is named field by field on
the form again (400) and nothing is stored; a saved change is in the course file the agent reads, with
an events row per changed field. Without a session or the session's form token nothing is stored.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuseat.catalog.bundle import load_catalog
from gpuseat.store import open_store
from gpuseat.web.app import Portal, create_app

from .served import PASSWORD, Served

GROUPS = """name = "Two groups"

[[group]]
name = "day"
count = 2
min_gpu_memory_gb = 16

[[group]]
name = "night"
count = 1
min_gpu_memory_gb = 16

[schedule]
start = 2026-09-07
days = 21

# the lab's own rules
[policy]
quota_hours = 40
idle_minutes = 30

[groups.night.policy]
quota_hours = 60
"""


def _policy(served: Served) -> dict[str, object]:
    return served.store.courses.course_file("lab").policy.model_dump()  # type: ignore[no-any-return]


def _events(served: Served) -> list[object]:
    return [e.detail for e in served.store.events.events("lab") if e.action == "course.policy"]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("policy.quota_hours", "-1", "quota_hours: Input should be greater than or equal to 0"),
        ("policy.idle_gpu_percent", "150", "idle_gpu_percent: Input should be less than or equal to 100"),
        ("policy.quota_hours", "forty", "quota_hours: not a number (got forty)"),
        ("policy.idle_minutes", "12.5", "idle_minutes: not a whole number of minutes (got 12.5)"),
        ("policy.never_connected_hours", "0", "never_connected_hours: Input should be greater than 0"),
    ],
)
def test_bad_input_is_named_on_the_form_and_nothing_is_stored(
    served: Served, field: str, value: str, message: str
) -> None:
    assert served.login().status_code == 303
    csrf = served.csrf("/course/settings")
    r = served.client.post("/course/settings", data={"csrf": csrf, "policy.grace_minutes": "5", field: value})
    assert r.status_code == 400 and message in r.text, r.text[:2000]
    assert f'id="{field}" name="{field}" value="{value}" aria-invalid="true"' in r.text  # what was typed, marked
    assert "nothing was saved" in r.text
    assert _policy(served)["quota_hours"] == 40.0 and _policy(served)["grace_minutes"] is None
    assert _events(served) == []


def test_a_saved_change_reaches_the_course_file_and_the_log(served: Served) -> None:
    assert (
        served.client.get("/course/settings", follow_redirects=False).headers["location"]
        == "/login?next=/course/settings"
    )
    assert served.client.post("/course/settings", data={"policy.quota_hours": "5"}).status_code == 401
    assert served.login().status_code == 303
    assert 'id="course-settings"' in served.client.get("/overview").text  # linked from the overview
    page = served.client.get("/course/settings")
    assert page.status_code == 200 and 'name="policy.quota_hours" value="40.0"' in page.text
    assert served.client.post("/course/settings", data={"policy.quota_hours": "12"}).status_code == 403
    link_csrf = served.csrf(f"/t/{served.links['ann']}")
    assert (
        served.client.post("/course/settings", data={"csrf": link_csrf, "policy.quota_hours": "12"}).status_code == 403
    )
    assert _policy(served)["quota_hours"] == 40.0
    csrf = served.csrf("/course/settings")
    r = served.client.post(
        "/course/settings", data={"csrf": csrf, "policy.quota_hours": "12", "policy.lead_minutes": "20"}
    )
    assert r.status_code == 200 and "saved 2 changes" in r.text
    policy = _policy(served)
    assert policy == {
        "quota_hours": 12.0,
        "idle_gpu_percent": None,
        "idle_minutes": None,  # a blank field is not set: the form is the whole policy
        "grace_minutes": None,
        "lead_minutes": 20,
        "never_connected_hours": None,
    }, policy
    assert _policy(served)["quota_hours"] == 12.0 and _policy(served)["lead_minutes"] == 20
    assert {"field": "policy.quota_hours", "from": 40.0, "to": 12.0} in _events(served)
    again = served.client.post(
        "/course/settings", data={"csrf": csrf, "policy.quota_hours": "12", "policy.lead_minutes": "20"}
    )
    assert "nothing changed" in again.text
    assert served.store.requests.seat_hours("lab")["ann"].quota == 12.0  # what the agent and the participant page count


def test_a_groups_override_is_edited_and_the_rest_of_the_file_is_kept(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}", create=True)
    (tmp_path / "g.toml").write_text(GROUPS)
    store.courses.create_course(tmp_path / "g.toml", key="g")
    store.accounts.set_password("admin", PASSWORD)
    client = TestClient(create_app(Portal(store, load_catalog(), "g", link_days_after_end=None)))
    served = Served(store, client, {})
    try:
        assert served.login().status_code == 303
        page = client.get("/course/settings").text
        assert (
            'name="groups.day.quota_hours" value=""' in page and 'name="groups.night.quota_hours" value="60.0"' in page
        )
        form = {"csrf": served.csrf("/course/settings"), "policy.quota_hours": "40", "policy.idle_minutes": "30"}
        bad = client.post("/course/settings", data=form | {"groups.night.idle_gpu_percent": "150"})
        assert bad.status_code == 400 and "idle_gpu_percent: Input should be less than or equal to 100" in bad.text
        r = client.post(
            "/course/settings", data=form | {"groups.night.quota_hours": "80", "groups.day.quota_hours": "10"}
        )
        assert r.status_code == 200 and "saved 2 changes" in r.text
        course = store.courses.course_file("g")
        assert course.policy_for("night")["quota_hours"] == 80.0 and course.policy_for("day")["quota_hours"] == 10.0
        assert course.policy_for("day")["idle_minutes"] == 30
        text = store.courses.course_text("g")
        assert "# the lab's own rules" in text and text.count("[policy]") == 1 and "[groups.night.policy]" in text
        details = [e.detail for e in store.events.events("g") if e.action == "course.policy"]
        assert {"field": "groups.night.policy.quota_hours", "from": 60.0, "to": 80.0} in details and len(details) == 2
    finally:
        client.close()
        store.close()


QUOTED = """name = "Named groups"

[[group]]
name = "late \\"owls\\" 🦉 <b>"
count = 1
min_gpu_memory_gb = 16

[[group]]
name = "night"
count = 1
min_gpu_memory_gb = 16

[schedule]
start = 2026-09-07
days = 21

[groups . 'night' . policy]
quota_hours = 60
"""


def test_a_group_of_any_name_and_a_table_in_any_spelling_are_edited_again_and_again(tmp_path: Path) -> None:
    """A group named with an emoji was written as JSON's surrogate pair (no TOML: "cannot edit" on every save),
    one with a quote was saved once and then never again (its table was not recognised as a policy table, so it
    stayed beside the new one), and so was a hand-written ``[groups . 'night' . policy]``."""
    store = open_store(f"sqlite:///{tmp_path / 'q.db'}", create=True)
    (tmp_path / "q.toml").write_text(QUOTED)
    store.courses.create_course(tmp_path / "q.toml", key="q")
    store.accounts.set_password("admin", PASSWORD)
    client = TestClient(create_app(Portal(store, load_catalog(), "q", link_days_after_end=None)))
    served = Served(store, client, {})
    owls = 'late "owls" 🦉 <b>'
    try:
        assert served.login().status_code == 303
        page = client.get("/course/settings").text
        assert "<legend>Group late &#34;owls&#34; 🦉 &lt;b&gt;</legend>" in page and "🦉 <b>" not in page
        csrf = served.csrf("/course/settings")
        for hours in ("5", "6"):
            form = {"csrf": csrf, f"groups.{owls}.quota_hours": hours, "groups.night.quota_hours": hours + "0"}
            r = client.post("/course/settings", data=form)
            assert r.status_code == 200 and "saved 2 changes" in r.text, r.text[:3000]
            course = store.courses.course_file("q")
            assert course.policy_for(owls)["quota_hours"] == float(hours)
            assert course.policy_for("night")["quota_hours"] == float(hours + "0")
        assert store.courses.course_text("q").count("policy]") == 2
    finally:
        client.close()
        store.close()
