"""The course's ``[policy]`` and seat hours (issue 40): validation that names the field and stores nothing,
the worked example of docs/policy.md (sessions exempt, access hours only), quotas per group and per person,
top-ups, and a stop that stops the count."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from gpuseat.core import selfservice
from gpuseat.core.course import Course

DOCS = Path(__file__).parents[2] / "docs" / "policy.md"
BASE = """name = "lab"
[schedule]
start = 2027-03-01
days = 19
[[group]]
name = "students"
count = 2
[[group]]
name = "tutors"
count = 1
"""


def _worked_example() -> str:
    text = DOCS.read_text()
    return re.search(r"## Worked example.*?```toml\n(.*?)```", text, re.S).group(1)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("policy", "field", "says"),
    [
        ("[policy]\nquota_hours = -4\n", "policy.quota_hours", "greater than or equal to 0"),
        ("[policy]\nidle_gpu_percent = 150\n", "policy.idle_gpu_percent", "less than or equal to 100"),
        ("[policy]\nidle_minutes = true\n", "policy.idle_minutes", ""),
        ("[policy]\nidle_mins = 3\n", "policy.idle_mins", "unknown field"),
        ("[groups.students.policy]\ngrace_minutes = -1\n", "groups.students.policy.grace_minutes", ""),
        ("[groups.nobody.policy]\nquota_hours = 3\n", "", "(its groups: students, tutors): name one of them, or add"),
    ],
)
def test_a_bad_policy_is_one_message_exit_2_and_nothing_stored(
    cli: Any, tmp_path: Path, policy: str, field: str, says: str
) -> None:
    path = tmp_path / "lab.toml"
    path.write_text(BASE + policy)
    db = f"sqlite:///{tmp_path / 'c.db'}"
    r = cli("course", "create", path, "--key", "lab", "--db", db)
    assert r.code == 2, r.out + r.err
    assert r.err.count("error:") == 1 and says in r.err, r.err
    if field:
        assert f"field '{field}'" in r.err, r.err
    assert not (tmp_path / "c.db").exists() or '"lab"' not in cli("course", "list", "-f", "json", "--db", db).out


def test_group_and_course_policy_and_defaults() -> None:
    import tomllib

    c = Course.model_validate(
        tomllib.loads(
            BASE + "[policy]\nquota_hours = 40\nidle_minutes = 30\n[groups.tutors.policy]\nquota_hours = 100\n"
        )
    )
    assert c.policy_for("students") == {
        "quota_hours": 40.0,
        "idle_gpu_percent": 5.0,
        "idle_minutes": 30,
        "grace_minutes": 10,
        "lead_minutes": 15,
        "never_connected_hours": None,
    }
    assert c.policy_for("tutors")["quota_hours"] == 100.0
    assert c.policy_for(None)["quota_hours"] == 40.0


def test_the_worked_example_counts_outside_sessions_inside_access_hours() -> None:
    import tomllib

    c = Course.model_validate(tomllib.loads(_worked_example()))
    assert c.policy.quota_hours == 40 and c.policy.idle_minutes == 30
    tz = ZoneInfo("UTC")
    s = c.schedule

    def at(day: int, hour: int) -> datetime:
        return datetime(2027, 3, day, hour, tzinfo=tz)

    open_ = [(a.replace(tzinfo=tz), b.replace(tzinfo=tz)) for a, b in s.access_intervals()]
    exempt = [(a.replace(tzinfo=tz), b.replace(tzinfo=tz)) for a, b in s.session_intervals()]
    # Monday: in the session 14-17 and an hour after it: 1 h counts
    assert selfservice.counted_hours([(at(1, 14), at(1, 18))], open_, exempt) == pytest.approx(1.0)
    # a weekend left running (Sat 6 and Sun 7 March): 14 h a day, the access hours only
    assert selfservice.counted_hours([(at(6, 0), at(8, 0))], open_, exempt) == pytest.approx(28.0)


def test_a_stop_stops_the_count_and_a_start_resumes_it() -> None:
    t0 = datetime(2027, 3, 6, 8, tzinfo=UTC)
    h = timedelta(hours=1)
    timeline = [(t0 + 2 * h, "stop", "by ann"), (t0 + 5 * h, "start", None)]
    runs = selfservice.running_intervals([(t0, t0 + 10 * h)], timeline, t0 + 8 * h)
    assert runs == [(t0, t0 + 2 * h), (t0 + 5 * h, t0 + 8 * h)]
    assert selfservice.run_state(timeline).running
    assert not selfservice.run_state(timeline[:1]).running and selfservice.run_state(timeline[:1]).reason == "by ann"
    hours = selfservice.hours_of(4.0, 1.0, runs, None, [], t0 + 8 * h, running_now=True)
    assert hours.used == pytest.approx(5.0) and hours.left == 0.0 and hours.runs_out_at is None


def test_store_hours_person_quota_topups_and_requests(course2016: Any) -> None:
    store = course2016
    people = [p.key for p in store.roster.participants(None)]
    ann = people[0]
    store.seats.add_seats(
        None, [{"key": "s1", "kind": "gpu", "host": "gpu1", "engine": "host", "device_uuid": "GPU-1"}]
    )
    store.seats.assign(None, ann, "s1")
    assert store.requests.seat_hours(None)[ann].quota is None  # the 2016 course has no [policy]
    store.requests.add_seat_hours(None, ann, 10, kind="quota", actor="t")
    store.requests.add_seat_hours(None, ann, 2.5, actor="t")
    got = store.requests.seat_hours(None)[ann]
    assert got.quota == 10 and got.topups == 2.5 and got.running and 12 < got.left + got.used < 12.6
    with pytest.raises(Exception, match="hours"):
        store.requests.add_seat_hours(None, ann, -1, actor="t")
    stop = store.requests.request_seat(None, ann, "stop", actor="t")
    assert stop.state == "pending" and stop.seat == "s1"
    assert store.requests.finish_request(None, stop.id, ok=True, reason="stopped")
    assert not store.requests.finish_request(None, stop.id, ok=False)  # only once
    assert store.requests.run_states(None)[ann].running is False
    assert store.requests.seat_hours(None)[ann].running is False
    # a participant without a seat: a key is kept, a stop refused
    other = people[1]
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl b@x"
    assert store.requests.request_seat(None, other, "key", actor="t", key=key).state == "done"
    with pytest.raises(Exception, match="holds no seat"):
        store.requests.request_seat(None, other, "stop", actor="t")


def test_a_one_group_course_refuses_a_policy_for_another_group(cli: Any, tmp_path: Path) -> None:
    """A course without [[group]] tables has one group, ``participants``: ``[groups.tutors.policy]`` there applied
    to nobody and was stored unsaid (the organizer thought tutors had 100 h); ``[groups.participants]`` applies."""
    one = "name = 'lab'\nparticipants = 4\n[schedule]\nstart = 2027-03-01\ndays = 19\n[policy]\nquota_hours = 40\n"
    db = f"sqlite:///{tmp_path / 'c.db'}"
    path = tmp_path / "lab.toml"
    path.write_text(one + "[groups.tutors.policy]\nquota_hours = 100\n")
    r = cli("course", "create", path, "--key", "lab", "--db", db)
    assert r.code == 2 and r.err.count("error:") == 1, r.err
    assert "[groups.tutors] names no group of this course" in r.err and "participants" in r.err, r.err
    path.write_text(one + "[groups.participants.policy]\nquota_hours = 100\n")
    assert cli("course", "create", path, "--key", "lab", "--db", db).code == 0
