"""The clock steps back (an NTP correction, a VM restored from a snapshot) while a course runs: no
assignment is stored that ends before it starts or overlaps another of the same seat or person, an
events row says the clock stepped, and the database refuses a backwards row whatever writes it.

The clock is injected: the store's one clock is the database's (``store.rows.clock_sql``), and its SQL
expression gets the offset the test moves; every ``gpuseat.store`` module's ``datetime`` gets it too (an
SQLite store's clock is the clock of the machine that holds the file, which also stamps SQLite's claims),
so every store path (ORM, the raw-SQL claims of both databases) sees one stepped clock.
"""

from __future__ import annotations

import importlib
import itertools
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from gpuseat.store import CourseStore, SeatSpec, claim_sql, claims, hours_read, rows
from gpuseat.store.views import AssignmentView


class _SteppedClock(datetime):
    offset = timedelta(0)

    @classmethod
    def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
        return datetime.now(tz) + cls.offset


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> type[_SteppedClock]:
    """Step the store's clock with ``clock.offset = timedelta(...)``."""
    for name in ("gpuseat.store.claims", "gpuseat.store.seatfile"):  # loaded, so that they are patched too
        importlib.import_module(name)

    monkeypatch.setattr(_SteppedClock, "offset", timedelta(0))
    for name, module in list(sys.modules.items()):
        if name.startswith("gpuseat.store") and getattr(module, "datetime", None) is datetime:
            monkeypatch.setattr(module, "datetime", _SteppedClock)
    real_sql = rows.clock_sql

    def stepped_sql(dialect: str) -> str:
        return f"({real_sql(dialect)} + {_SteppedClock.offset.total_seconds()})"

    for module in (rows, claim_sql, hours_read):
        monkeypatch.setattr(module, "clock_sql", stepped_sql)
    monkeypatch.setattr(claims, "pg_claim_sql", claim_sql.pg_claim_sql.__wrapped__)  # built at each claim
    return _SteppedClock


@pytest.fixture
def course(course2016: CourseStore) -> CourseStore:
    course2016.seats.add_seats(None, [SeatSpec(key=f"s{i}", kind="gpu", memory_gb=8) for i in (1, 2)])
    return course2016


def _no_backwards_or_overlap(history: list[AssignmentView]) -> None:
    far = datetime.max.replace(tzinfo=UTC)
    for a in history:
        assert a.valid_to is None or a.valid_to >= a.valid_from, a
    for attr in ("seat", "participant"):
        by: dict[str, list[AssignmentView]] = {}
        for a in history:
            by.setdefault(getattr(a, attr), []).append(a)
        for held in by.values():
            held.sort(key=lambda a: (a.valid_from, a.valid_to or far))
            for before, after in itertools.pairwise(held):
                assert before.valid_to is not None and before.valid_to <= after.valid_from, (before, after)


def _stepped_events(store: CourseStore) -> list[Any]:
    with store.database.engine.connect() as conn:
        return list(conn.execute(text("SELECT at, detail FROM events WHERE action = 'clock.stepped'")))


def test_release_and_reassign_after_the_clock_stepped_back(course: CourseStore, clock: type[_SteppedClock]) -> None:
    course.seats.assign(None, "amartin", "s1")
    clock.offset = timedelta(hours=-1)  # NTP corrects the clock by an hour
    released = course.seats.release(None, participant="amartin")
    assert released is not None and released.valid_to is not None
    assert released.valid_to >= released.valid_from  # today: an hour before it started
    course.seats.assign(None, "bcosta", "s1")  # the seat's next holder: not from before amartin left
    course.seats.move(None, "bcosta", "s2")
    clock.offset = timedelta(hours=-3)  # a VM restored from an older snapshot
    course.seats.release(None, seat="s2")
    course.seats.assign_all(None, partial=True)
    _no_backwards_or_overlap(course.seats.history(None))
    assert _stepped_events(course), "no events row says the clock stepped"


def test_a_claim_after_the_clock_stepped_back(course: CourseStore, clock: type[_SteppedClock]) -> None:
    first = course.claims.claim_seat(None, "amartin", mode="pool")
    course.seats.release(None, participant="amartin")
    clock.offset = timedelta(minutes=-30)
    again = course.claims.claim_seat(None, "bcosta", mode="pool")  # the raw-SQL claim, on either database
    assert again.key == first.key
    assert again.assigned_since is not None and first.assigned_since is not None
    assert again.assigned_since >= first.assigned_since
    _no_backwards_or_overlap(course.seats.history(None))
    steps = _stepped_events(course)
    assert steps, "no events row says the clock stepped"


def test_the_database_refuses_a_backwards_assignment(course: CourseStore) -> None:
    """The last guard (migration 0013), for any code path that would get past the store's clock."""
    course.seats.assign(None, "amartin", "s1")
    with pytest.raises(IntegrityError), course.database.engine.begin() as conn:
        conn.execute(text("UPDATE assignments SET valid_to = :t"), {"t": datetime(2020, 1, 1, tzinfo=UTC)})


def test_a_seat_started_after_the_clock_stepped_back_runs(course: CourseStore, clock: type[_SteppedClock]) -> None:
    """amartin stops her seat, the store's clock steps back an hour, she starts it again: it runs, and its
    hours count again (the start, done an hour "before" the stop, was sorted before it: the seat stayed
    stopped, and the agent's own stop for hours could land before a start the same way)."""
    course.seats.add_seats(None, [SeatSpec(key="h1", kind="gpu", memory_gb=8, engine="host", host="gpu1")])
    course.seats.assign(None, "amartin", "h1")
    for action in ("stop", "start"):
        r = course.requests.request_seat(None, "amartin", action, actor="amartin")
        assert course.requests.finish_request(None, r.id, ok=True, reason=action)
        if action == "stop":
            clock.offset = timedelta(hours=-1)  # NTP corrects the clock by an hour
    state = course.requests.run_states(None)["amartin"]
    assert state.running, state
    course.requests.agent_stop(None, "amartin", "no seat hours left: test")
    after = course.requests.run_states(None)["amartin"]
    assert not after.running and after.reason == "no seat hours left: test", after
    assert _stepped_events(course), "no events row says the clock stepped"
