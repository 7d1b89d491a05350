"""``gpuseat course update`` after day one, seen from the participant's side on the host engine: a real sshd, real
accounts, stand-in device files, an agent's pass with the real runner (docs/course.md, *After day one: course
update*). The organizer edits the course file and stores it with the CLI; the agent, which sleeps until the access
window's next change as the old file set it (days away), plans again at once from the new one.

- ``--dry-run`` changes nothing in the store or on the machine, and wakes no agent.
- The end moved to yesterday: the pass locks the holders out and ends what they run; a second pass has nothing
  to do. The end moved later again: the next pass lets them in.
- ``[policy] quota_hours`` lowered below what the holders used, in the file: their seats stop as with the
  settings page, and the page says why.
"""

from __future__ import annotations

import html
import re
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engines.test_after_day_one_clock import Clock
from gpuseat.engines.agent import Agent, AgentOptions
from gpuseat.engines.host.machine import Machine
from gpuseat.engines.runner import Runner
from gpuseat.store import CourseStore, open_store

from .conftest import COURSE_TOML, make_course
from .hostlab import Lab
from .test_selfservice import _ready
from .test_selfservice_after_day_one import _page, _requests_on_page

TODAY = datetime.now(UTC).date()


def _file(first_day: date, days: int, policy: str = "") -> str:
    """The course open all day (UTC) on ``days`` days from ``first_day``, closed before and after."""
    return (
        COURSE_TOML.replace(
            "start = 2026-09-07\ndays = 5\n", f'start = {first_day}\ndays = {days}\naccess = "00:00-24:00"\n'
        )
        + policy
    )


@pytest.fixture
def running(lab: Lab, tmp_path: Path, cli: Callable[..., Any]) -> Iterator[tuple[Lab, str, CourseStore, Agent]]:
    """Course ``lab`` open from yesterday for three days; ann and ben seated and in; an agent of the host (real
    runner) after its first pass, on a clock of its own."""
    db = f"sqlite:///{tmp_path / 'course.db'}"
    make_course(lab, tmp_path, cli, db, _file(TODAY - timedelta(days=1), 3))
    (tmp_path / "skel").mkdir()
    _ready(cli, lab, db, tmp_path / "skel")
    store = open_store(db)
    said: list[str] = []
    agent = Agent(store, AgentOptions(engine="host", host="gpu1", course="lab", resync_s=9 * 86400),
                  runner=Runner(), say=said.append, clock=Clock())  # fmt: skip
    try:
        first = agent.tick()
        assert first is not None and not first.failed and first.next_change is not None, said
        assert not _steps(first), "the agent's first pass redid what apply did"
        yield lab, db, store, agent
    finally:
        store.close()


def _steps(p: Any) -> list[str]:
    return [f"{o.state} {o.step.action} {o.step.target}" for r in p.reports for o in r.outcomes]


def _update(cli: Callable[..., Any], tmp_path: Path, db: str, text: str, *flags: str) -> Any:
    (tmp_path / "lab.toml").write_text(text)
    r = cli("course", "update", tmp_path / "lab.toml", "--key", "lab", *flags, "--db", db)
    assert r.code == 0, r.out + r.err
    return r


def _tick(agent: Agent) -> Any:
    """The agent's next tick a second later (no boundary of the window is due)."""
    agent.clock.t += 1  # type: ignore[attr-defined]
    return agent.tick()


def _refused(lab: Lab, who: str) -> bool:
    done = lab.ssh(who, "true")
    return done.returncode == 255 and "denied" in done.stderr.lower()


def _text(response: Any) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", response.text)).split())


def test_an_end_moved_to_yesterday_locks_them_out_and_a_later_end_lets_them_in(
    running: tuple[Lab, str, CourseStore, Agent], cli: Callable[..., Any], tmp_path: Path
) -> None:
    lab, db, store, agent = running
    ann, ben = (lab.people[k].user for k in ("ann", "ben"))
    assert _tick(agent) is None  # nothing due: the window's next change is days away
    rows = len(store.events.events("lab"))
    ended = _file(TODAY - timedelta(days=3), 2)
    # --dry-run: printed, nothing stored, nothing on the machine
    dry = _update(cli, tmp_path, db, ended, "--dry-run")
    assert f"ends_on: {TODAY + timedelta(days=1)} → {TODAY - timedelta(days=2)}" in dry.out, dry.out
    assert "nothing stored" in dry.out, dry.out
    assert store.courses.course_file("lab").schedule.start == TODAY - timedelta(days=1)
    assert len(store.events.events("lab")) == rows
    assert _tick(agent) is None
    assert not Machine(Runner()).locked(ann) and lab.ssh("ann", "true").returncode == 0
    # the end moved to yesterday: the next pass locks them out and ends what they run
    work = subprocess.Popen(["sleep", "600"], user=ann)  # ann's training loop, left running
    try:
        done = _update(cli, tmp_path, db, ended)
        assert "2 field(s) changed" in done.out and "ends_on" in done.out, done.out
        closed = _tick(agent)
        assert closed is not None, "the agent slept on to the old file's window change"
        assert _steps(closed) == [
            f"done account.lock {ann}",
            f"done processes.end {ann}",
            f"done account.lock {ben}",
        ], _steps(closed)
        assert work.wait(10) is not None
    finally:
        if work.poll() is None:
            work.kill()
            work.wait()
    assert _refused(lab, "ann") and _refused(lab, "ben")
    assert Machine(Runner()).locked(ann) and Machine(Runner()).locked(ben)
    assert closed.next_change is None  # the schedule has ended: nothing opens again
    # a second pass has nothing to do, and the agent waits
    assert _tick(agent) is None
    plan = cli("apply", "--course", "lab", "--engine", "host", "--host", "gpu1", "--dry-run", "--db", db)
    assert "Plan: 0 to add, 0 to change, 0 to take away." in plan.out, plan.out + plan.err
    # the end moved later again: the next pass lets them in
    _update(cli, tmp_path, db, _file(TODAY - timedelta(days=3), 5))
    opened = _tick(agent)
    assert opened is not None and _steps(opened) == [f"done account.unlock {ann}", f"done account.unlock {ben}"]
    assert lab.ssh("ann", "true").returncode == 0 and lab.ssh("ben", "true").returncode == 0
    assert opened.next_change is not None and _tick(agent) is None


def test_a_quota_lowered_in_the_file_stops_the_seat_as_the_settings_page_does(
    running: tuple[Lab, str, CourseStore, Agent], cli: Callable[..., Any], tmp_path: Path
) -> None:
    """``[policy] quota_hours = 0`` stored by ``course update`` (not ``/course/settings``): the next pass stops
    the holders' seats for seat hours (tests/engines/test_stale_pass_policy.py stores the settings page's
    ``course.policy`` row), and ann's page says why; her Start is refused for the hours, and her page says so."""
    lab, db, _store, agent = running
    done = _update(cli, tmp_path, db, _file(TODAY - timedelta(days=1), 3, "\n[policy]\nquota_hours = 0\n"))
    assert "policy.quota_hours: (none) → 0.0" in done.out and "priced" not in done.out, done.out
    stopped = _tick(agent)
    assert stopped is not None
    assert {s for s in _steps(stopped) if "seat.stop" in s} == {"done seat.stop seat-01", "done seat.stop seat-02"}
    assert _refused(lab, "ann") and _refused(lab, "ben")
    with _page(db, "ann") as press:
        page = _text(press())
        assert "Your seat is stopped: no seat hours left: 0.0 of 0 h used." in page, page
        assert press(action="start").status_code == 303
        refused = _tick(agent)
        assert refused is not None and _refused(lab, "ann")
        said = _requests_on_page(press)
    assert said[-1] == "start: failed (no seat hours left (0 of 0 h): ask the organizer for more)", said
    assert _tick(agent) is None
