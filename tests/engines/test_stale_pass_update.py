"""A course file updated while an agent's pass runs (``gpuseat course update``, a ``course.update`` row) stops that
pass, as a release does (tests/engines/test_stale_pass.py): an end moved earlier or a session dropped takes access
away, but the pass went on granting with the plan it began with, until its end. Now the pass stops and the course
is planned again at once, from the file now stored. A dry-run host agent on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuseat.engines.agent import Agent, AgentOptions
from gpuseat.engines.base import STOPPED
from gpuseat.services.planning import read_course_file
from gpuseat.store import CourseStore

from .conftest import COURSE
from .test_after_day_one_clock import Clock
from .test_stale_pass import _grants, _lab, _Midway


def test_a_course_update_under_a_pass_stops_it_and_plans_again_at_once(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    _lab(store, url, tmp_path, cli)
    path = tmp_path / "lab.toml"
    path.write_text(COURSE.replace("days = 5", "days = 2"))  # the course ends three days earlier
    read = read_course_file(path)

    def update() -> None:
        done = store.courses.update_course("lab", read.course, source_text=read.text, actor="organizer")
        assert [c["field"] for c in done.changes] == ["ends_on"]

    clock = Clock()
    runner = _Midway(clock, update)
    agent = Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=3600), runner=runner,
                  say=lambda _line: None, holder="gpu1:1:abc", clock=clock)  # fmt: skip
    first = agent.tick()
    assert first is not None and runner.done
    assert _grants(first, "ben", "skipped"), "the pass went on granting with the course file it began with"
    assert all(o.message == STOPPED for r in first.reports for o in r.outcomes if o.state == "skipped")
    clock.t += 0.01
    again = agent.tick()  # at once, not at the next change or resync
    assert again is not None and again.reports
    assert store.courses.course_file("lab").schedule.days == 2
