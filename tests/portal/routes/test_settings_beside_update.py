"""A ``course update`` (the CLI) that lands while ``/course/settings`` saves: the page read the stored course file,
put its policy in, and wrote that text back, with the update's dates and sessions of the old file. The save is
refused (reload), and the update's file is kept."""

from __future__ import annotations

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
