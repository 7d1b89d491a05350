"""``gpuseat course update FILE``: an edited course file reaches the store (its show, one ``course.update`` events row
naming the fields) and the access window every engine plans from; the same file again, a bad file, an archived
course, an unknown key and a file that would orphan the roster's or the seats' groups change nothing (exit 2 for
the refusals). The real CLI on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from gpuseat.core.course import Course
from gpuseat.engines.apply import course_state
from gpuseat.store import open_store

GROUPS = '[[group]]\nname = "a"\ncount = 2\n\n[[group]]\nname = "b"\ncount = 2\n'


def ok(result):
    assert result.code == 0, result.err
    assert "Traceback" not in result.out + result.err
    return result


def refused(result, *parts: str) -> str:
    assert result.code == 2 and "Traceback" not in result.out + result.err, (result.out, result.err)
    for part in parts:
        assert part in result.err, result.err
    return result.err


def course_text(start: date, end: date, body: str = "participants = 2\n") -> str:
    """A course open all day, every day, from ``start`` to ``end``."""
    return f'name = "open"\n{body}\n[schedule]\nstart = {start}\nend = {end}\naccess = "00:00-24:00"\n'


def updates(url: str, key: str) -> list[dict]:
    with open_store(url) as store:
        return [e.detail for e in store.events.events(key) if e.action == "course.update"]


def shown(cli, url: str, key: str) -> dict:
    return json.loads(ok(cli("course", "show", "--course", key, "-f", "json", "--db", url)).out)


def test_an_earlier_end_reaches_the_store_and_closes_the_access_window(cli, url, tmp_path: Path) -> None:
    today = datetime.now(UTC).date()
    path = tmp_path / "open.toml"
    path.write_text(course_text(today - timedelta(days=1), today + timedelta(days=1)))
    ok(cli("course", "create", path, "--db", url))
    with open_store(url) as store:
        assert course_state(store, "open").closed is None
    path.write_text(course_text(today - timedelta(days=1), today - timedelta(days=1)))
    out = ok(cli("course", "update", path, "--dry-run", "--db", url)).out
    assert f"ends_on: {today + timedelta(days=1)} → {today - timedelta(days=1)}" in out and "nothing stored" in out
    assert shown(cli, url, "open")["ends_on"] == str(today + timedelta(days=1)) and updates(url, "open") == []
    out = ok(cli("course", "update", path, "--db", url)).out
    assert "course open: 1 field(s) changed" in out, out
    assert f"ends_on: {today + timedelta(days=1)} → {today - timedelta(days=1)}" in out
    assert shown(cli, url, "open")["ends_on"] == str(today - timedelta(days=1))
    (detail,) = updates(url, "open")
    assert detail["fields"] == ["ends_on"], detail
    with open_store(url) as store:  # what every engine's next pass plans from: access is taken away
        assert course_state(store, "open").closed == "the course's schedule has ended"
        assert store.courses.course_text("open") == path.read_text()


def test_the_same_file_again_changes_nothing_and_a_changed_need_asks_for_the_plan(cli, url, tmp_path: Path) -> None:
    path = tmp_path / "lab.toml"
    path.write_text(course_text(date(2026, 9, 7), date(2026, 9, 11)))
    ok(cli("course", "create", path, "--db", url))
    with open_store(url) as store:
        before = store.courses.set_plan_option("lab", {"rank": 1, "total_usd": 10}).updated_at
    assert ok(cli("course", "update", path, "--db", url)).out.strip() == "course lab: nothing changed"
    with open_store(url) as store:
        assert store.courses.get_course("lab").updated_at == before  # no write
        assert [e.action for e in store.events.events("lab")][-1] == "course.plan"  # no row
    path.write_text(course_text(date(2026, 9, 7), date(2026, 9, 11)) + "\n[policy]\nquota_hours = 3\n")
    out = ok(cli("course", "update", path, "--db", url)).out
    assert "policy.quota_hours: (none) → 3.0" in out and "plan option" not in out, out
    path.write_text(
        course_text(date(2026, 9, 7), date(2026, 9, 11), "participants = 3\n[needs]\nmin_gpu_memory_gb = 40\n")
    )
    out = ok(cli("course", "update", path, "--db", url)).out
    assert "participants: 2 → 3" in out and "needs: (none) → {" in out and "policy.quota_hours: 3.0 → (none)" in out
    assert "the stored plan option 1 priced the file before this change (participants, needs)" in out, out
    assert "--plan-option N" in out and shown(cli, url, "lab")["plan_option"]["rank"] == 1  # kept
    out = ok(cli("course", "update", path, "--plan-option", "1", "--db", url)).out  # the plan on the new file
    total = shown(cli, url, "lab")["plan_option"]["total_usd"]
    assert f"plan_option: option 1, $10 → option 1, ${total}" in out and "priced the file" not in out, out
    assert [d["fields"] for d in updates(url, "lab")] == [
        ["policy.quota_hours"],
        ["participants", "policy.quota_hours", "needs"],
        ["plan_option"],
    ]


def test_a_bad_file_an_unknown_key_and_an_archived_course_are_refused(cli, url, tmp_path: Path) -> None:
    path = tmp_path / "lab.toml"
    text = course_text(date(2026, 9, 7), date(2026, 9, 11))
    path.write_text(text)
    ok(cli("course", "create", path, "--db", url))
    path.write_text(text.replace("participants = 2", "participants = 0"))
    refused(cli("course", "update", path, "--db", url), str(path), "participants")
    path.write_text(text + "\n[groups.nobody.policy]\nquota_hours = 1\n")  # create's own check, shared
    refused(cli("course", "update", path, "--db", url), "[groups.nobody] names no group of this course")
    path.write_text(text.replace("end = 2026-09-11", "end = 2026-09-10"))
    refused(cli("course", "update", path, "--key", "lba", "--db", url), "--key: no course 'lba' to update",
            "Did you mean lab?", "gpuseat course create")  # fmt: skip
    refused(cli("course", "update", path, "--timezone", "Mars/Base", "--db", url), "--timezone", "Mars/Base")
    ok(cli("course", "archive", "lab", "--db", url))
    refused(cli("course", "update", path, "--db", url), "--key: course 'lab' is archived (read-only)")
    assert shown(cli, url, "lab")["ends_on"] == "2026-09-11" and updates(url, "lab") == []
    with open_store(url) as store:
        assert store.courses.course_text("lab") == text


def test_a_group_the_roster_or_a_seat_still_names_cannot_go(cli, url, tmp_path: Path) -> None:
    path = tmp_path / "lab.toml"
    text = course_text(date(2026, 9, 7), date(2026, 9, 11), GROUPS)
    path.write_text(text)
    ok(cli("course", "create", path, "--db", url))
    (tmp_path / "roster.csv").write_text("name,email,group\nAnn,ann@example.org,b\nBen,ben@example.org,b\n")
    ok(cli("roster", "import", tmp_path / "roster.csv", "--db", url))
    with open_store(url) as store:
        store.seats.add_seats("lab", [{"key": "s1", "kind": "gpu", "engine": "host", "groups": ["b"]}])
    path.write_text(text.replace('name = "b"\ncount = 2', 'name = "c"\ncount = 2'))
    refused(cli("course", "update", path, "--db", url), "course lab: this file would orphan what the course stores",
            "group 'b' is gone but 2 participant(s) of the roster are in it", "seat s1 is reserved for group 'b'",
            "gpuseat roster import")  # fmt: skip
    path.write_text(text.replace('name = "b"\ncount = 2', 'name = "b"\ncount = 1'))
    refused(cli("course", "update", path, "--db", url), "group 'b' plans 1 seat(s) but the roster has 2")
    path.write_text(text.replace('name = "a"\ncount = 2', 'name = "a"\ncount = 5'))  # a group no row names: fine
    assert "group.a.count: 2 → 5" in ok(cli("course", "update", path, "--db", url)).out
    assert [d["fields"] for d in updates(url, "lab")] == [["group.a.count"]]


def test_a_course_stored_without_a_file_is_given_one(cli, url, tmp_path: Path) -> None:
    path = tmp_path / "lab.toml"
    path.write_text(course_text(date(2026, 9, 7), date(2026, 9, 11)))
    with open_store(url, create=True) as store:
        store.courses.create_course_from(Course.model_validate({"name": "lab", "participants": 2,
                                                                 "schedule": {"start": "2026-09-07", "days": 1}}),
                                         key="lab")  # fmt: skip
    out = ok(cli("course", "update", path, "--db", url)).out
    assert (
        "name: lab → open" in out and "ends_on: 2026-09-07 → 2026-09-11" in out and "course file: (none) → given" in out
    )
    with open_store(url) as store:
        assert store.courses.course_file("lab").schedule.last_day == date(2026, 9, 11)
    got = json.loads(ok(cli("course", "update", path, "--timezone", "Europe/Berlin", "-f", "json", "--db", url)).out)
    assert got["changes"] == [{"field": "timezone", "from": "UTC", "to": "Europe/Berlin"}], got
    assert shown(cli, url, "lab")["timezone"] == "Europe/Berlin"
