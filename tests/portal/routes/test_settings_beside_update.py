"""A ``course update`` (the CLI) that lands while ``/course/settings`` saves: the page read the stored course file,
put its policy in, and wrote that text back, with the update's dates and sessions of the old file. The save is
refused (reload), and the update's file is kept."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from gpuseat.services.planning import read_course_file
from gpuseat.web.routes import settings as settings_route

from .served import COURSE, Served


def test_a_course_update_between_the_pages_read_and_its_write_is_kept(
    served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert served.login().status_code == 303
    csrf = served.csrf("/course/settings")
    updated = tmp_path / "lab.toml"
    updated.write_text(COURSE.replace("days = 21", "days = 5"))
    read = read_course_file(updated)
    rewritten = settings_route.rewritten

    def then_updated(text: str, edit: Any) -> Any:  # the update commits after the page read the file
        out = rewritten(text, edit)
        served.store.courses.update_course("lab", read.course, read.text, actor="cli")
        return out

    monkeypatch.setattr(settings_route, "rewritten", then_updated)
    r = served.client.post("/course/settings", data={"csrf": csrf, "policy.quota_hours": "30"})
    assert r.status_code == 400 and "nothing was saved" in r.text and "reload" in r.text, r.text[:3000]
    assert served.store.courses.get_course("lab").ends_on == date(2026, 9, 11)  # the update's end, not the old file's
    assert served.store.courses.course_text("lab") == read.text
    monkeypatch.setattr(settings_route, "rewritten", rewritten)
    csrf = served.csrf("/course/settings")  # reloaded: the save goes through over the updated file
    r = served.client.post("/course/settings", data={"csrf": csrf, "policy.quota_hours": "30"})
    assert r.status_code == 200 and "saved 1 change" in r.text, r.text[:3000]
    assert served.store.courses.course_file("lab").schedule.last_day == date(2026, 9, 11)
    assert served.store.courses.course_file("lab").policy.quota_hours == 30


def test_a_page_loaded_before_a_course_update_saves_nothing(served: Served, tmp_path: Path) -> None:
    """The page showed quota_hours = 40; a course update stored 50 since. Sent back with idle_minutes typed, the
    browser's form would write its 40 back (saved 2 changes, the update's value lost): refused, reloaded."""
    assert served.login().status_code == 303
    loaded = served.client.get("/course/settings").text
    version = re.search(r'name="file" value="([0-9a-f]+)"', loaded)
    assert version, "the form names no version of the course file it shows"
    csrf = re.search(r'name="csrf" value="([^"]+)"', loaded)
    assert csrf
    updated = tmp_path / "lab.toml"
    updated.write_text(COURSE.replace("quota_hours = 40", "quota_hours = 50"))
    read = read_course_file(updated)
    served.store.courses.update_course("lab", read.course, read.text, actor="cli")
    form = {"csrf": csrf.group(1), "file": version.group(1), "policy.quota_hours": "40", "policy.idle_minutes": "30"}
    r = served.client.post("/course/settings", data=form)
    assert r.status_code == 409 and "nothing was saved" in r.text and "changed since this page" in r.text, r.text
    assert served.store.courses.course_file("lab").policy.quota_hours == 50
    assert 'name="policy.quota_hours" value="50' in r.text  # the form shows what is stored now, with its version
    again = re.search(r'name="file" value="([0-9a-f]+)"', r.text)
    assert again and again.group(1) != version.group(1)
    form |= {"file": again.group(1), "policy.quota_hours": "50"}
    r = served.client.post("/course/settings", data=form)
    assert r.status_code == 200 and "saved 1 change" in r.text, r.text[:3000]
    assert served.store.courses.course_file("lab").policy.idle_minutes == 30
    assert served.store.courses.course_file("lab").policy.quota_hours == 50
