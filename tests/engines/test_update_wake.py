"""When the agent wakes after ``gpuseat course update`` (docs/course.md, *After day one: course update*): the
``course.update`` row plans that course again at once; the pass plans that course only, and the access window
changes of the agent's other courses stay due: it kept the one course's next change (none, or days later) as the
agent's and slept past the other course's window change until the resync. A dry-run host agent of every course on
SQLite and PostgreSQL, on a clock of its own that the test moves."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuseat.engines.agent import Agent, AgentOptions
from gpuseat.engines.runner import Runner
from gpuseat.store import CourseStore

from .conftest import COURSE
from .test_after_day_one_clock import Clock
from .test_agent_restore import _seats


def test_a_course_update_keeps_another_courses_window_change_due(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    today = datetime.now(UTC).date()
    (tmp_path / "open.toml").write_text(
        COURSE.replace('"lab"', '"open"').replace(
            "start = 2026-09-07\ndays = 5\n", f'start = {today - timedelta(days=1)}\ndays = 3\naccess = "00:00-24:00"\n'
        )
    )
    store.courses.create_course(tmp_path / "open.toml", key="open")
    _seats(cli, url, tmp_path, "open", 1)
    _seats(cli, url, tmp_path, "lab", 2)
    clock = Clock()
    agent = Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=9 * 86400), runner=Runner(dry_run=True),
                  say=lambda _line: None, clock=clock)  # fmt: skip
    first = agent.tick()
    assert first is not None and first.next_change is not None  # open's window closes at the end of tomorrow
    left = (first.next_change - store.requests.now()).total_seconds()
    (tmp_path / "lab.toml").write_text(COURSE.replace('"lab"', '"lab, renamed"'))
    r = cli("course", "update", tmp_path / "lab.toml", "--key", "lab", "--db", url)
    assert r.code == 0 and "name" in r.out, r.out + r.err
    clock.t += 1
    assert agent.tick() is not None  # lab is planned again at once
    clock.t += left - 60
    assert agent.tick() is None  # a minute before open's window closes: nothing due
    clock.t += 61
    assert agent.tick() is not None, "open's window change waited for the resync (9 days here, 5 minutes by default)"


def test_the_agent_wakes_at_the_window_change_the_update_moved(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """One course open all day until the end of tomorrow: the update moves the end two days later, and the agent
    wakes at the new end, not at the old one too (a pass of every course, for nothing)."""
    today = datetime.now(UTC).date()

    def ends(days: int) -> str:
        return COURSE.replace(
            "start = 2026-09-07\ndays = 5\n",
            f'start = {today - timedelta(days=1)}\ndays = {days}\naccess = "00:00-24:00"\n',
        )

    (tmp_path / "lab.toml").write_text(ends(3))
    assert cli("course", "update", tmp_path / "lab.toml", "--key", "lab", "--db", url).code == 0
    _seats(cli, url, tmp_path, "lab", 1)
    clock = Clock()
    agent = Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=9 * 86400), runner=Runner(dry_run=True),
                  say=lambda _line: None, clock=clock)  # fmt: skip
    first = agent.tick()
    assert first is not None and first.next_change is not None
    old = (first.next_change - store.requests.now()).total_seconds()
    (tmp_path / "lab.toml").write_text(ends(5))
    assert cli("course", "update", tmp_path / "lab.toml", "--key", "lab", "--db", url).code == 0
    clock.t += 1
    moved = agent.tick()
    assert moved is not None and moved.next_change is not None
    assert moved.next_change - first.next_change == timedelta(days=2)
    clock.t += old + 60
    assert agent.tick() is None, "the agent passed at the end the update moved away"
    clock.t += 2 * 86400 - 60
    assert agent.tick() is not None, "the agent slept past the end the update set"
