"""``[policy] never_connected_hours`` added after day one (the portal's ``/course/settings``, ``gpuseat course
update``) counts from when it was set for each holder, not from when they got their seat: counted from day 1, a
rule set on day 3 stopped every holder at the next pass with no window at all, one whose day-1 login was no
longer in what the agent reads (a vacuumed journal) too. A holder seated after the rule keeps the window from
getting the seat. The host engine's planner with a stand-in journal (as tests/delivery/test_selfservice.py's
journal test), on SQLite and PostgreSQL; the store's read of when the rule was set, per group."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select, update
from tests.delivery.test_selfservice import JOURNAL_CMD, JOURNAL_KEYS, JOURNAL_PRINTS

from gpuseat.core.roster import RosterText
from gpuseat.db.models import Assignment, Participant
from gpuseat.engines import registry
from gpuseat.engines.apply import course_state
from gpuseat.engines.base import Changes
from gpuseat.engines.host.requests import plan_requests
from gpuseat.engines.runner import RecordingRunner
from gpuseat.store import CourseStore, open_store
from gpuseat.web import course_settings

COURSE = """name = "Late rule lab"
participants = 3

[needs]
min_gpu_memory_gb = 16

[schedule]
start = 2026-09-07
days = 5
"""
RULE = "\n[policy]\nnever_connected_hours = 24\n"


def _back(url: str, who: str, at: datetime) -> None:
    """As if ``who`` had got their seat at ``at``."""
    db = create_engine(url)
    with db.begin() as conn:
        pid = conn.scalar(select(Participant.id).where(Participant.key == who))
        conn.execute(update(Assignment).where(Assignment.participant_id == pid).values(valid_from=at))
    db.dispose()


def _by_settings(store: CourseStore, _cli: Callable[..., Any], _path: Path) -> None:
    """What ``POST /course/settings`` does with ``never_connected_hours = 24`` typed in the course's field."""
    course = store.courses.course_file("lab")
    edit = course_settings.parse(course, {"policy.never_connected_hours": "24"})
    changed = course_settings.changes(course_settings.current(course), edit)
    text, _checked = course_settings.rewritten(store.courses.course_text("lab"), edit)
    store.courses.set_course_text("lab", text, changes=changed, actor="organizer")


def _by_update(store: CourseStore, cli: Callable[..., Any], path: Path) -> None:
    """``gpuseat course update`` with the edited file."""
    path.write_text(COURSE + RULE)
    r = cli("course", "update", path, "--key", "lab", "--db", store.database.url)
    assert r.code == 0, r.out + r.err


@pytest.mark.parametrize("set_rule", [_by_settings, _by_update], ids=["settings", "course-update"])
def test_a_rule_set_on_day_three_counts_from_then_not_from_getting_the_seat(
    url: str, tmp_path: Path, cli: Callable[..., Any], set_rule: Callable[..., None]
) -> None:
    (tmp_path / "lab.toml").write_text(COURSE)
    with open_store(url, create=True) as store:
        store.courses.create_course(tmp_path / "lab.toml", key="lab")
        rows = "".join(f"{who},{who.title()},{who}@example.edu,{key}\n" for who, key in JOURNAL_KEYS.items())
        rows += "cat,Cat,cat@example.edu,\n"
        store.roster.import_roster("lab", RosterText("key,name,email,ssh_key\n" + rows, where="roster.csv"))
        store.seats.add_seats(
            "lab", [{"key": f"gpu1-{n}", "kind": "gpu", "engine": "host", "host": "gpu1"} for n in (1, 2, 3)]
        )
        day1 = store.requests.now() - timedelta(days=2)
        for who, seat in (("ann", "gpu1-1"), ("ben", "gpu1-2")):
            store.seats.assign("lab", who, seat)
            _back(url, who, day1)
        set_rule(store, cli, tmp_path / "lab.toml")  # day 3
        ruled = store.requests.policy_set_at("lab", "never_connected_hours")
        assert set(ruled) == {"ann", "ben", "cat"}
        rule = ruled["ann"]
        assert day1 < rule <= store.requests.now()
        store.seats.assign("lab", "cat", "gpu1-3")  # cat is seated an hour after the rule
        _back(url, "cat", rule + timedelta(hours=1))
        login = {p.key: p.unix_user or p.key for p in store.roster.participants("lab")}
        # ben's day-1 login is gone from the journal (vacuumed); he logs in again 2 h after the rule
        journal: list[tuple[datetime, str]] = []

        def answer(args: tuple[str, ...]) -> tuple[int, str, str]:
            assert args[: len(JOURNAL_CMD)] == JOURNAL_CMD, args
            since = datetime.strptime(args[-1], "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=UTC)
            return 0, "".join(f"{line}\n" for at, line in journal if at >= since), ""

        def verdicts(at: datetime) -> dict[str, str]:
            engine = registry.build("host", store, "lab", runner=RecordingRunner(answers={("journalctl",): answer}),
                                    host="gpu1")  # fmt: skip
            changes = Changes("host", "lab", "gpu1")
            plan_requests(engine, course_state(store, "lab", now=at), changes)
            return {
                str(x.participant): x.data.get("reason") or x.action
                for x in changes.steps
                if x.action in ("seat.stop", "seat.connected")
            }

        assert verdicts(rule + timedelta(minutes=1)) == {}  # the next pass: nobody (day 1 + 24 h is long past)
        assert verdicts(rule + timedelta(hours=23, minutes=59)) == {}
        journal.append((rule + timedelta(hours=2), f"Accepted publickey for {login['ben']} from 192.0.2.7 port 33632 "
                                                   f"ssh2: ED25519 {JOURNAL_PRINTS['ben']}"))  # fmt: skip
        never = "never connected: {} did not log in within 24 h of {}"
        assert verdicts(rule + timedelta(hours=24, minutes=1)) == {
            "ann": never.format("ann", "the rule being set"),
            "ben": "seat.connected",
        }
        # cat, seated after the rule: her window counts from getting the seat, as before
        assert verdicts(rule + timedelta(hours=25, minutes=1))["cat"] == never.format("cat", "getting the seat")


GROUPS = """name = "Two groups"

[[group]]
name = "day"
count = 1
min_gpu_memory_gb = 16

[[group]]
name = "night.shift"
count = 1
min_gpu_memory_gb = 16

[schedule]
start = 2026-09-07
days = 5
"""


def test_when_the_rule_was_set_is_the_courses_or_the_own_groups_change_of_it(
    url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    path = tmp_path / "two.toml"
    path.write_text(GROUPS)
    with open_store(url, create=True) as store:
        store.courses.create_course(path, key="two")
        roster = "key,name,email,group\nann,Ann,ann@example.edu,day\nben,Ben,ben@example.edu,night.shift\n"
        store.roster.import_roster("two", RosterText(roster, where="roster.csv"))
        assert store.requests.policy_set_at("two", "never_connected_hours") == {}  # set since create, or not at all

        def update(text: str) -> datetime:
            path.write_text(text)
            r = cli("course", "update", path, "--key", "two", "--db", url)
            assert r.code == 0, r.out + r.err
            return store.requests.now()

        # the night group's table added (one change row, "groups.night.shift", the whole table): ben only
        night = update(GROUPS + '\n[groups."night.shift".policy]\nnever_connected_hours = 12\n')
        assert list(store.requests.policy_set_at("two", "never_connected_hours")) == ["ben"]
        # another field of the course's policy: nobody's rule changes
        update(GROUPS + '\n[policy]\nquota_hours = 10\n[groups."night.shift".policy]\nnever_connected_hours = 12\n')
        got = store.requests.policy_set_at("two", "never_connected_hours")
        assert list(got) == ["ben"] and got["ben"] <= night
        # the course's own value: everyone, from then
        update(
            GROUPS + "\n[policy]\nquota_hours = 10\nnever_connected_hours = 48\n"
            '[groups."night.shift".policy]\nnever_connected_hours = 12\n'
        )
        got = store.requests.policy_set_at("two", "never_connected_hours")
        assert set(got) == {"ann", "ben"} and got["ann"] == got["ben"] >= night
