"""``sessions_only`` decides "is a lab session on now?" on the store's clock (the database's time, as the agent
and the participant page do), not on the hub host's: a participant starting their server from the hub is let
in during a session and refused outside one even when the hub's clock is days off. The hub's clock is stepped
as the seat-hours clock tests step a process's (tests/stepped_clock.py: ``time.time`` and every gpuseat
module's ``datetime.now``); SQLite's ``'now'`` and the PostgreSQL server keep the true time. The hooks run
in-process on real spawner objects and a real store (SQLite and PostgreSQL), as in test_hub_hooks.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

pytest.importorskip("jupyterhub")

from hubcourse import seat_specs
from test_hub_hooks import CONTACT, refusal, spawn, spawners, stop, url  # noqa: F401 (fixtures)

from gpuseat.core.roster import RosterText
from gpuseat.jupyterhub import HubSettings, SeatHooks
from gpuseat.store import CourseStore, open_store
from stepped_clock import REAL_DATETIME, stepped

TZ = "Europe/Berlin"
HEAD = 'name = "Hub lab"\nparticipants = 1\n[needs]\nmin_gpu_memory_gb = 8\nisolation = "partitioned"\n'


def _course(store: CourseStore, tmp: Path, key: str, sessions: list[tuple[date, str]]) -> None:
    """Course ``key`` (time zone Europe/Berlin) with these lab sessions (date, hours); ada holds seat mig-1."""
    first = min(d for d, _ in sessions)
    days = (max(d for d, _ in sessions) - first).days + 2  # a session may run past midnight
    text = f"{HEAD}[schedule]\nstart = {first}\ndays = {days}\n"
    text += "".join(f'[[schedule.session]]\ndate = {d}\nhours = "{h}"\n' for d, h in sessions)
    (tmp / f"{key}.toml").write_text(text)
    store.courses.create_course(tmp / f"{key}.toml", key=key, timezone=TZ)
    store.roster.import_roster(key, RosterText("name,email,group,unix_user\nAda,ada@example.edu,,ada\n", where="r.csv"))
    store.seats.add_seats(key, seat_specs(1))
    store.seats.assign(key, "ada", "mig-1")


def _sessions_only(db: str, course: str, clock: Callable[[], float] = time.monotonic) -> SeatHooks:
    return SeatHooks(HubSettings(course=course, db_url=db, contact=CONTACT, sessions_only=True), clock=clock)


@pytest.mark.parametrize("by", [timedelta(days=5), timedelta(days=-5)], ids=["ahead", "behind"])
def test_a_hub_clock_days_off_neither_refuses_a_start_in_a_session_nor_lets_one_in_outside(
    url: str,  # noqa: F811
    tmp_path: Path,
    spawners,  # noqa: F811
    by: timedelta,
) -> None:
    """Course ``now`` is in a lab session all day yesterday, today and tomorrow (Berlin time); course ``then``
    has its sessions 5 days away (ahead: still to come; behind: over). A hub whose clock is 5 days off lets
    ada start on ``now`` (it refused her: "no more lab sessions" / "the next one starts" today) and refuses
    her on ``then`` with the true next or last session (it let her in: by its clock a session was on)."""
    today = REAL_DATETIME.now(ZoneInfo(TZ)).date()
    full_days = lambda *days: [(today + timedelta(days=d), "00:00-24:00") for d in days]  # noqa: E731
    store = open_store(url, create=True)
    try:
        _course(store, tmp_path, "now", full_days(-1, 0, 1))
        _course(store, tmp_path, "then", full_days(by.days, by.days + 1))
        with stepped(by):
            hub_clock = time.time  # the hub host's clock, as the hooks read it: 5 days off
            spawn(_sessions_only(url, "now", hub_clock), spawners("ada"))
            then = refusal(_sessions_only(url, "then", hub_clock), spawners("ada"))
        seat = store.seats.get_seat("now", "mig-1")
        assert (seat.state, seat.engine_ref) == ("requested", "ada/"), seat
        if by > timedelta(0):
            nxt = today + by
            assert then == (
                f"Outside the lab sessions of course then: the next one starts {nxt:%a %Y-%m-%d} 00:00 ({TZ}). "
                f"Come back then, or ask {CONTACT}."
            )
        else:
            ended = today + by + timedelta(days=2)  # the last session ran to midnight
            assert then == (
                f"Course then has no more lab sessions (the last one ended {ended:%a %Y-%m-%d} 00:00, {TZ}). "
                f"Ask {CONTACT}."
            )
        assert store.seats.get_seat("then", "mig-1").state != "requested"
    finally:
        store.close()


def test_a_start_opens_the_session_lead_before_a_session_on_the_stores_clock(tmp_path: Path, spawners) -> None:  # noqa: F811
    """Starts open ``session_lead_min`` (10) minutes before a session: ada starts 8 minutes before one; 20
    minutes before one she is refused with its start in the course's time zone; stopped, she gives it back."""
    db = f"sqlite:///{tmp_path / 'course.db'}"
    store = open_store(db, create=True)
    try:
        now = store.requests.now().astimezone(ZoneInfo(TZ))
        soon, later = ((now + timedelta(minutes=m)).replace(second=0, microsecond=0) for m in (9, 21))
        for key, at in (("soon", soon), ("later", later)):  # a session may cross midnight
            _course(store, tmp_path, key, [(at.date(), f"{at:%H:%M}-{at + timedelta(minutes=30):%H:%M}")])
        h = _sessions_only(db, "soon")
        spawn(h, spawners("ada"))
        assert store.seats.get_seat("soon", "mig-1").state == "requested"
        stop(h, spawners("ada"))
        assert store.seats.get_seat("soon", "mig-1").state == "released"
        assert refusal(_sessions_only(db, "later"), spawners("ada")) == (
            f"Outside the lab sessions of course later: the next one starts {later:%a %Y-%m-%d %H:%M} ({TZ}). "
            f"Come back then, or ask {CONTACT}."
        )
    finally:
        store.close()
