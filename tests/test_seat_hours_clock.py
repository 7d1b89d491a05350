"""Seat hours run on the store's one clock (the database's time), whatever the clock of the process that
records a start or stop, or counts the hours, says: stepped hours ahead, a running seat is not charged
for the step and the agent does not stop it "out of hours"; stepped back, a stop is not put before the
start it follows (the seat would run on past its quota), and the hours used are the time it really ran.

The process's clock is stepped as the lease clock-step test does it (``time.time``), and every gpuseat
module's ``datetime.now`` with it (tests/stepped_clock.py); SQLite's ``'now'`` and the PostgreSQL server keep the true time, as
the database's clock does when one machine's clock is wrong. SQLite and PostgreSQL each.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuseat.store import CourseStore, open_store
from pg_schema import db_url  # noqa: F401 (the url fixture: SQLite and PostgreSQL)
from stepped_clock import REAL_DATETIME as _REAL_DATETIME
from stepped_clock import stepped

COURSE = 'name = "lab"\nparticipants = 2\n[schedule]\nstart = 2026-09-07\ndays = 5\n'
HOURS = timedelta(hours=5)


@pytest.fixture
def store(url: str, tmp_path: Path) -> Iterator[CourseStore]:
    """Course ``lab``: ann holds seat s1 (on the true clock), ben holds s2."""
    s = open_store(url, create=True)
    (tmp_path / "lab.toml").write_text(COURSE)
    s.courses.create_course(tmp_path / "lab.toml", key="lab")
    (tmp_path / "roster.csv").write_text("key,name,email\nann,Ann,ann@example.org\nben,Ben,ben@example.org\n")
    s.roster.import_roster("lab", tmp_path / "roster.csv")
    s.seats.add_seats(
        "lab",
        [{"key": f"s{i}", "kind": "gpu", "host": "gpu1", "engine": "host", "device_uuid": f"GPU-{i}"} for i in (1, 2)],
    )
    s.seats.assign("lab", "ann", "s1")
    s.seats.assign("lab", "ben", "s2")
    yield s
    s.close()


def _used_now(store: CourseStore) -> float:
    """ann's hours used as a process with a true clock reads them."""
    return store.requests.seat_hours("lab")["ann"].used


def test_a_process_clock_stepped_ahead_does_not_charge_the_step(store: CourseStore) -> None:
    """Hours read, and a stop recorded, by a process 5 hours ahead: ann is charged the seconds her seat
    ran, not 5 hours (with a 2-hour quota she would be out of hours and stopped)."""
    store.requests.add_seat_hours("lab", "ann", 2, kind="quota", actor="t")
    with stepped(HOURS):
        got = store.requests.seat_hours("lab")["ann"]
        assert got.running and got.used < 0.05 and got.left is not None and got.left > 1.95, got
        assert got.runs_out_at is not None
        assert abs(got.runs_out_at - (_REAL_DATETIME.now(UTC) + timedelta(hours=got.left))) < timedelta(minutes=1)
        page = store.requests.page_of("lab", "ann")
        assert page.hours is not None and page.hours.used < 0.05, page.hours
        stop = store.requests.agent_stop("lab", "ann", "idle: test")
        assert abs(stop.requested_at - _REAL_DATETIME.now(UTC)) < timedelta(minutes=1), stop
        asked = store.requests.request_seat("lab", "ben", "stop", actor="ben")
        assert store.requests.finish_request("lab", asked.id, ok=True, reason="stopped")
    # back on a true clock: the stops are where they happened; the hours stopped counting there
    assert not store.requests.run_states("lab")["ann"].running
    (done,) = store.requests.seat_requests("lab", participant="ben")
    assert done.done_at is not None and abs(done.done_at - _REAL_DATETIME.now(UTC)) < timedelta(minutes=1), done
    hours = store.requests.seat_hours("lab")
    assert hours["ann"].used < 0.05 and hours["ben"].used < 0.05, hours
    assert not hours["ann"].running and hours["ann"].runs_out_at is None
    later = store.requests.seat_hours("lab", now=_REAL_DATETIME.now(UTC) + timedelta(hours=3))
    assert later["ann"].used < 0.05 and later["ben"].used < 0.05, later  # stopped now, not 5 hours on


def test_a_process_clock_stepped_back_does_not_put_a_stop_before_the_start(store: CourseStore) -> None:
    """ann stops and starts her seat on a true clock, then stops it through a process 5 hours behind:
    her seat is stopped (the stop is not sorted before the start, which let the seat run on past her
    quota), and her hours stop counting at that stop."""
    for action in ("stop", "start"):
        r = store.requests.request_seat("lab", "ann", action, actor="ann")
        assert store.requests.finish_request("lab", r.id, ok=True, reason=action)
    assert store.requests.run_states("lab")["ann"].running
    with stepped(-HOURS):
        r = store.requests.request_seat("lab", "ann", "stop", actor="ann")
        assert store.requests.finish_request("lab", r.id, ok=True, reason="stopped")
        state = store.requests.run_states("lab")["ann"]
        assert not state.running and state.reason == "stopped", state
        page = store.requests.page_of("lab", "ann")
        assert page.run_state is not None and not page.run_state.running and page.hours is not None
        assert not page.hours.running and 0 <= page.hours.used < 0.05, page.hours
    used = _used_now(store)
    time.sleep(0.5)
    assert _used_now(store) == used  # stopped: not counting on
    assert 0 < used < 0.05


def test_a_process_clock_stepped_back_gives_no_hours_back(store: CourseStore) -> None:
    """ann's quota is used up on the true clock; a process 5 hours behind still finds none left (it
    counted up to its own 'now', before she got the seat, and found the whole quota left)."""
    store.requests.add_seat_hours("lab", "ann", 0.0002, kind="quota", actor="t")  # 0.72 s
    deadline = time.monotonic() + 60
    while store.requests.seat_hours("lab")["ann"].left != 0.0:
        assert time.monotonic() < deadline, "the quota did not run out within 60 s"
        time.sleep(0.05)
    with stepped(-HOURS):
        got = store.requests.seat_hours("lab")["ann"]
        assert got.left == 0.0 and got.used >= 0.0002, got


def test_an_explicit_now_is_still_the_time_counted_against(store: CourseStore) -> None:
    """A caller (a test, a forecast) that passes ``now`` gets hours at that time, on any clock."""
    start = store.requests.now()
    assert abs(start - _REAL_DATETIME.now(UTC)) < timedelta(minutes=1)
    with stepped(HOURS):
        later = store.requests.seat_hours("lab", now=start + timedelta(hours=3))["ann"]
        assert 2.99 < later.used < 3.01, later
        page = store.requests.page_of("lab", "ann", now=start + timedelta(hours=1))
        assert page.hours is not None and page.hours.used == pytest.approx(1.0, abs=0.01), page.hours


def _stepped_rows(store: CourseStore) -> list[Any]:
    return [e for e in store.events.events("lab") if e.action == "clock.stepped"]


@pytest.mark.parametrize("by", [HOURS, -HOURS], ids=["ahead", "behind"])
def test_seats_given_by_a_process_clock_stepped_are_stamped_on_the_stores_clock(
    store: CourseStore, by: timedelta
) -> None:
    """A process 5 hours off moves ann to a third seat, releases ben and hands s2 back by a claim: each
    start and end is stamped on the store's clock, against which seat hours count, and no clock step is
    logged. Ahead, the history and the events ran 5 hours into the future, and every later write on a
    true clock was stamped there too, as a "clock step" (for 5 hours); behind, every write was logged as
    a clock step and stamped at the course's last event instead."""
    store.seats.add_seats(
        "lab", [{"key": "s3", "kind": "gpu", "host": "gpu1", "engine": "host", "device_uuid": "GPU-3"}]
    )
    store.requests.add_seat_hours("lab", "ann", 2, kind="quota", actor="t")
    # PostgreSQL's claim is one statement stamped by the server; SQLite's claim is stamped by the claiming
    # process, whose clock is the database's (the file is on its machine: SQLite has no remote writer)
    postgres = store.database.dialect == "postgresql"
    with stepped(by):
        store.seats.move("lab", "ann", "s3")
        store.seats.release("lab", seat="s2")
        if postgres:
            claimed = store.claims.claim_seat("lab", "ben", mode="pool")
    if not postgres:
        claimed = store.claims.claim_seat("lab", "ben", mode="pool")
    assert claimed.key in ("s1", "s2"), claimed
    used = _used_now(store)
    assert used < 0.05, used  # seconds since the fixture gave her s1, not 5 hours
    time.sleep(0.3)
    assert _used_now(store) > used, "ann's hours stopped counting"
    true_now = _REAL_DATETIME.now(UTC)
    for a in store.seats.history("lab"):
        for when in (a.valid_from, a.valid_to):
            assert when is None or abs(when - true_now) < timedelta(minutes=1), a
    assert all(abs(e.at - true_now) < timedelta(minutes=1) for e in store.events.events("lab")), store.events.events(
        "lab"
    )
    assert _stepped_rows(store) == [], _stepped_rows(store)
    store.seats.move("lab", "ann", "s2")  # on a true clock: no step
    assert _stepped_rows(store) == [], _stepped_rows(store)


# -- the agent's stop decision on a real host (a real sshd; root) ------------------------------------------


def _window_course(first_day: date, days: int) -> str:
    """A course open all day (UTC) on ``days`` days from ``first_day``, closed before and after."""
    from delivery.conftest import COURSE_TOML

    return COURSE_TOML.replace(
        "start = 2026-09-07\ndays = 5\n", f'start = {first_day}\ndays = {days}\naccess = "00:00-24:00"\n'
    )


def _lab(url: str, tmp_path: Path, cli: Callable[..., Any], toml: str | None = None) -> Iterator[tuple[Any, str]]:
    from delivery.conftest import COURSE_TOML, make_course
    from delivery.hostlab import MIG_AND_WHOLE, have_tools, new_lab

    why = have_tools()
    if why:
        pytest.skip(why)
    lab = new_lab()
    try:
        lab.build(MIG_AND_WHOLE)
        make_course(lab, tmp_path, cli, url, toml or COURSE_TOML)
        yield lab, url
    finally:
        lab.close()


@pytest.fixture
def labcourse(url: str, tmp_path: Path, cli: Callable[..., Any]) -> Iterator[tuple[Any, str]]:
    """The delivery tests' stand-in GPU host and its course ``lab`` (ann, ben, cat, dan) in ``url``."""
    yield from _lab(url, tmp_path, cli)


@pytest.fixture
def windowlab(url: str, tmp_path: Path, cli: Callable[..., Any]) -> Iterator[tuple[Any, str]]:
    """The same, its course open all day (UTC) by its access hours from yesterday to tomorrow."""
    yield from _lab(url, tmp_path, cli, _window_course(_REAL_DATETIME.now(UTC).date() - timedelta(days=1), 3))


def _hours(cli: Callable[..., Any], db: str) -> dict[str, Any]:
    r = cli("seat", "hours", "-f", "json", "--db", db)
    assert r.code == 0, r.err
    return {h["participant"]: h for h in json.loads(r.out)}


def test_an_apply_on_a_clock_stepped_ahead_does_not_stop_a_seat_for_hours_not_used(
    labcourse: tuple[Any, str], cli: Callable[..., Any], tmp_path: Path
) -> None:
    """ann has a 2-hour quota and has used seconds of it; ``gpuseat apply`` on a host whose clock is 5
    hours ahead leaves her seat running (it stopped it: "no seat hours left: 5.0 of 2 h used")."""
    from delivery.test_selfservice import _apply, _ready, _requests

    lab, db = labcourse
    (tmp_path / "skel").mkdir()
    _ready(cli, lab, db, tmp_path / "skel")
    assert cli("seat", "quota", "--participant", "ann", "--hours", "2", "--db", db).code == 0
    with stepped(HOURS):
        _apply(cli, db)
        hours = _hours(cli, db)
    assert _requests(cli, db, "ann") == [], _requests(cli, db, "ann")
    assert lab.ssh("ann", "true").returncode == 0, lab.sshd_log()[-2000:]
    assert hours["ann"]["used"] < 0.05 and hours["ann"]["left"] > 1.95 and hours["ann"]["running"], hours


def test_an_apply_on_a_clock_stepped_back_keeps_a_stopped_seat_stopped(
    labcourse: tuple[Any, str], cli: Callable[..., Any], tmp_path: Path
) -> None:
    """ann starts her seat (true clock), then stops it through a host 5 hours behind: the next apply on a
    true clock keeps her out (it sorted the stop before the start and let her in again)."""
    from delivery.test_selfservice import _apply, _ready, _requests

    lab, db = labcourse
    (tmp_path / "skel").mkdir()
    _ready(cli, lab, db, tmp_path / "skel")
    for action, code in (("stop", 255), ("start", 0)):
        assert cli("seat", action, "--participant", "ann", "--db", db).code == 0
        _apply(cli, db)
        assert lab.ssh("ann", "true").returncode == code, (action, _requests(cli, db, "ann"))
    with stepped(-HOURS):
        assert cli("seat", "stop", "--participant", "ann", "--db", db).code == 0
        _apply(cli, db)
    assert lab.ssh("ann", "true").returncode == 255
    assert [r["state"] for r in _requests(cli, db, "ann")] == ["done", "done", "done"]
    _apply(cli, db)
    assert lab.ssh("ann", "true").returncode == 255, _requests(cli, db, "ann")
    used = _hours(cli, db)["ann"]
    assert not used["running"] and used["used"] < 0.05, used


@pytest.mark.parametrize("by", [timedelta(days=5), timedelta(days=-5)], ids=["ahead", "behind"])
def test_the_access_window_is_the_stores_not_the_machines_clock(
    store: CourseStore, tmp_path: Path, by: timedelta
) -> None:
    """Whether a course's access window is open is worked out on the store's clock: a process whose clock is
    days off neither shuts a course in its hours (it read "the course's schedule has ended") nor opens one
    whose days are over."""
    from gpuseat.core.window import LEAD
    from gpuseat.engines.apply import course_state

    today = _REAL_DATETIME.now(UTC).date()
    for key, first, days in (("open", today - timedelta(days=1), 3), ("over", today + by - timedelta(days=1), 3)):
        (tmp_path / f"{key}.toml").write_text(_window_course(first, days).replace("Host lab", key))
        store.courses.create_course(tmp_path / f"{key}.toml", key=key)
    with stepped(by):
        opened, ended = course_state(store, "open"), course_state(store, "over")
    assert opened.closed is None, opened.closed
    assert ended.closed is not None, "a course outside its days was opened by a clock days off"
    # its next change is its own opening (the lead before its first day, on the store's clock), or none once over:
    # a bound of "3 days ahead" failed from 23:45 UTC, when the opening is 2 days 23 h 45 min ahead
    opens = _REAL_DATETIME.combine(today + by - timedelta(days=1), _REAL_DATETIME.min.time(), UTC) - LEAD
    assert ended.next_change == (opens if opens > _REAL_DATETIME.now(UTC) else None)


@pytest.mark.parametrize("by", [timedelta(days=5), timedelta(days=-5)], ids=["ahead", "behind"])
def test_an_apply_on_a_clock_days_off_keeps_a_course_in_its_hours_open(
    windowlab: tuple[Any, str], cli: Callable[..., Any], tmp_path: Path, by: timedelta
) -> None:
    """ann's course is open all day from yesterday to tomorrow; ``gpuseat apply`` on a host whose clock is 5
    days off leaves her able to log in (it locked her out: "the course's schedule has ended" / not begun)."""
    from delivery.test_selfservice import _apply, _ready

    lab, db = windowlab
    (tmp_path / "skel").mkdir()
    _ready(cli, lab, db, tmp_path / "skel")
    with stepped(by):
        _apply(cli, db)
    assert lab.ssh("ann", "true").returncode == 0, lab.sshd_log()[-2000:]


@pytest.mark.parametrize("by", [timedelta(days=3), timedelta(days=-3)], ids=["ahead", "behind"])
def test_an_agent_on_a_clock_days_off_passes_once_and_waits(store: CourseStore, tmp_path: Path, by: timedelta) -> None:
    """The access window's next change is on the store's clock; an agent whose clock is days ahead compares it
    with the store's time too, so it passes once and then waits (it saw the change as passed on every tick and
    planned every course again each second)."""
    from gpuseat.engines.agent import Agent, AgentOptions
    from gpuseat.engines.runner import Runner

    today = _REAL_DATETIME.now(UTC).date()
    (tmp_path / "open.toml").write_text(_window_course(today - timedelta(days=1), 3).replace("Host lab", "open"))
    store.courses.create_course(tmp_path / "open.toml", key="open")
    store.seats.add_seats(
        "open", [{"key": "o1", "kind": "gpu", "host": "gpu9", "engine": "host", "device_uuid": "GPU-9"}]
    )
    with stepped(by):
        options = AgentOptions(course="open", engine="host", host="gpu9", resync_s=3600)
        agent = Agent(store, options, runner=Runner(dry_run=True), say=lambda _line: None)
        agent._backoff = 3600.0  # gpu9 is not this machine: its pass fails, and is not retried within the test
        first = agent.tick()
        assert first is not None and first.next_change is not None
        assert [agent.tick() for _ in range(3)] == [None, None, None]
