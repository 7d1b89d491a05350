"""A seat-hours change written while an agent's pass runs stops that pass, as a release does
(tests/engines/test_stale_pass.py): the course's ``quota_hours`` lowered below what its holders used (the
organizer's ``/course/settings``, a ``course.policy`` row) or one person's quota (``gpuseat seat quota``, an
``hours.quota`` row) takes their seat away, but the pass went on granting it with the plan it began with, until
its end; the next pass stopped it. Now the pass stops and the course is planned again at once: the holders out of
hours are stopped (the real host's stop: tests/delivery/test_selfservice.py). A dry-run host agent on SQLite and
PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuseat.engines.agent import Agent, AgentOptions
from gpuseat.engines.base import STOPPED
from gpuseat.store import CourseStore

from .test_after_day_one_clock import Clock
from .test_stale_pass import _grants, _lab, _Midway


def _course_quota_zero(store: CourseStore) -> list[str]:
    """What ``/course/settings`` stores for ``quota_hours = 0``: the new file and a ``course.policy`` row."""
    text = store.courses.course_text("lab") + "\n[policy]\nquota_hours = 0\n"  # type: ignore[attr-defined]
    change = {"field": "policy.quota_hours", "from": None, "to": 0.0}
    store.courses.set_course_text("lab", text, changes=[change], actor="organizer")  # type: ignore[attr-defined]
    return ["ann", "ben"]


def _ben_quota_zero(store: CourseStore) -> list[str]:
    store.requests.add_seat_hours("lab", "ben", 0, kind="quota", actor="organizer")
    return ["ben"]


@pytest.mark.parametrize("change", [_course_quota_zero, _ben_quota_zero], ids=["course.policy", "hours.quota"])
def test_quota_lowered_under_a_pass_stops_it_and_plans_again_at_once(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any], change: Callable[[CourseStore], list[str]]
) -> None:
    _lab(store, url, tmp_path, cli)
    clock, out = Clock(), []
    runner = _Midway(clock, lambda: out.extend(change(store)))
    agent = Agent(store, AgentOptions(engine="host", host="gpu1", resync_s=3600), runner=runner,
                  say=lambda _line: None, holder="gpu1:1:abc", clock=clock)  # fmt: skip
    first = agent.tick()
    assert first is not None and runner.done and out
    for who in out:
        assert _grants(first, who, "skipped"), f"the pass went on granting {who}'s seat after their hours were gone"
    assert all(o.message == STOPPED for r in first.reports for o in r.outcomes if o.state == "skipped")
    clock.t += 0.01
    again = agent.tick()  # at once, not at the next change or resync
    assert again is not None and again.reports
