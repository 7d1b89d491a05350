"""A monitor of one course reads its seats again only when its own course changed.

Twenty courses may share one PostgreSQL store: another course's registration rush or agent writes events
and assignments all the time, and none of it changes this course's seats or holders. ``refresh`` (the
writer's) and ``seats_if_changed`` (the tick's) must leave them alone then, and still re-read on every
change of the course itself: an assign, a move, a release, a seat added or removed, the course archived or
deleted, a course created with the key after the monitor started with none. A monitor of all courses still
re-reads on any course's change.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import event, select

from gpuseat.core.readiness import Access, Readiness
from gpuseat.core.roster import RosterText
from gpuseat.db import make_engine
from gpuseat.db.models import Participant, Sample, Seat
from gpuseat.readings import Gpu, Leaf, LeafReading
from gpuseat.store import open_monitor, open_store
from gpuseat.store.monitor import MonitorStore

EXAMPLES = Path(__file__).parents[2] / "examples"
ROSTER = "name,email,unix_user,key\nAnn,ann@example.org,ann,ann\nBen,ben@example.org,ben,ben\n"


def _course(url: str, key: str) -> None:
    """A course with ann and ben and three seats (device ``GPU-<key>-N``); ann holds seat-1."""
    with open_store(url, create=True) as store:
        store.courses.create_course(EXAMPLES / "course-2016.toml", key=key)
        store.roster.import_roster(key, RosterText(ROSTER, where=f"{key}.csv"))
        seats = [
            {"key": f"seat-{i}", "kind": "gpu", "host": "gpu1", "device_uuid": f"GPU-{key}-{i}"} for i in (1, 2, 3)
        ]
        store.seats.add_seats(key, seats)
        store.seats.assign(key, "ann", "seat-1")


def _others_written(url: str) -> None:
    """Course c2 changes every way c1 may: an assign, a move, a release, a seat added and removed, a line."""
    with open_store(url) as store:
        store.seats.assign("c2", "ben", "seat-2")
        store.seats.move("c2", "ann", "seat-3")
        store.seats.release("c2", seat="seat-3")
        store.seats.add_seats("c2", [{"key": "seat-9", "kind": "gpu", "host": "gpu1", "device_uuid": "GPU-c2-9"}])
        store.lifecycle.remove_seats("c2", ["seat-9"], actor="test")
        store.events.log("c2", "seat.check", seat="seat-1")


def _holders(monitor: MonitorStore) -> dict[str, str | None]:
    return {e.seat: e.participant for e in monitor.seat_map().entries}


def _reloads(monitor: MonitorStore) -> bool:
    """The writer's refresh and the tick's seat map both see the change (or both do not)."""
    refreshed = monitor.refresh()
    mapped = monitor.seats_if_changed() is not None
    assert refreshed == mapped
    return refreshed


def test_another_courses_writes_leave_the_monitor_unreloaded_and_its_own_changes_reload_it(url):
    _course(url, "c1")
    _course(url, "c2")
    monitor = open_monitor(url, course="c1")
    try:
        assert monitor.seats_if_changed() is not None  # the tick's first seat map (refresh's: when opened)
        assert not _reloads(monitor)
        _others_written(url)
        assert not _reloads(monitor)  # the old rule re-read here: the store's newest event and assignment moved

        with open_store(url) as store:
            changes = [
                lambda: store.seats.assign("c1", "ben", "seat-2"),
                lambda: store.seats.move("c1", "ann", "seat-3"),
                lambda: store.seats.release("c1", seat="seat-2"),
                lambda: store.seats.add_seats(
                    "c1", [{"key": "seat-4", "kind": "gpu", "host": "gpu1", "device_uuid": "GPU-c1-4"}]
                ),
                lambda: store.lifecycle.remove_seats("c1", ["seat-1"], actor="test"),
                lambda: store.lifecycle.archive_course("c1", actor="test"),
            ]
            for change in changes:
                change()
                assert _reloads(monitor), change
                assert not _reloads(monitor)
                _others_written(url)
                assert not _reloads(monitor)
        assert _holders(monitor) == {"seat-2": None, "seat-3": "ann", "seat-4": None}
        seat3 = monitor._seat_ids["seat-3"][0]
        assert monitor.holder(seat3, 4e9) == monitor._seat_ids["seat-3"][1] is not None  # ann, as refresh read
    finally:
        monitor.close()


def test_a_course_created_after_the_monitor_started_and_then_deleted_reloads_it(url, tmp_path):
    _course(url, "c2")
    monitor = open_monitor(url, course="c1")  # no course c1 yet
    try:
        assert monitor.seats_if_changed() is not None and monitor._seat_ids == {}
        _others_written(url)
        assert not _reloads(monitor)
        _course(url, "c1")
        assert _reloads(monitor)
        assert set(monitor._seat_ids) == {"seat-1", "seat-2", "seat-3"}
        assert _holders(monitor) == {"seat-1": "ann", "seat-2": None, "seat-3": None}
        with open_store(url) as store:
            store.lifecycle.delete_course("c1", export_to=tmp_path / "c1.zip", actor="test")
        assert monitor.refresh() and monitor._seat_ids == {}
        emptied = monitor.seats_if_changed()
        assert emptied is not None and emptied.entries == ()
    finally:
        monitor.close()


def test_a_monitor_of_all_courses_reloads_on_any_courses_change(url):
    _course(url, "c1")
    _course(url, "c2")
    monitor = open_monitor(url)
    try:
        assert monitor.seats_if_changed() is not None
        assert not _reloads(monitor)
        with open_store(url) as store:
            store.events.log("c2", "seat.check", seat="seat-1")
        assert _reloads(monitor)
    finally:
        monitor.close()


@contextmanager
def _selects(monitor: MonitorStore) -> Iterator[list[tuple[str, Any]]]:
    """The SELECT statements (and their parameters) the monitor's store runs inside the block."""
    caught: list[tuple[str, Any]] = []

    def on(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if statement.startswith("SELECT"):
            caught.append((statement, parameters))

    engine = monitor._database.engine
    event.listen(engine, "before_cursor_execute", on)
    try:
        yield caught
    finally:
        event.remove(engine, "before_cursor_execute", on)


def _plan(monitor: MonitorStore, caught: tuple[str, Any]) -> str:
    """SQLite's own plan of one caught statement, its lines joined by `` | ``."""
    with monitor._database.engine.connect() as conn:
        return " | ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {caught[0]}", caught[1]))


def test_the_course_monitors_question_reads_one_index_entry_of_its_course(tmp_path):
    """SQLite's own plan of the statement ``refresh`` runs: the course's newest events row comes from
    ``ix_events_course_id`` (migration 0020); ``ix_events_course_at`` would read every row of the course."""
    url = f"sqlite:///{tmp_path / 'g.db'}"
    _course(url, "c1")
    monitor = open_monitor(url, course="c1")
    with _selects(monitor) as caught:
        monitor.refresh()
    try:
        assert len(caught) == 1, caught  # unchanged: one question, nothing read again
        plan = _plan(monitor, caught[0])
        assert "USING COVERING INDEX ix_events_course_id (course_key=?)" in plan, plan
        assert "SCAN events" not in plan and "SCAN assignments" not in plan, plan
    finally:
        monitor.close()


def _credited(url: str, ts: int) -> dict[str, str | None]:
    """Seat key → the participant its sample at ``ts`` is credited to."""
    q = (
        select(Seat.key, Participant.key)
        .select_from(Sample)
        .join(Seat, Seat.id == Sample.seat_id)
        .outerjoin(Participant, Participant.id == Sample.participant_id)
        .where(Sample.ts == ts)
    )
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return {seat: who for seat, who in conn.execute(q)}
    finally:
        engine.dispose()


def test_an_engines_routine_rows_leave_the_monitor_unreloaded_and_a_move_after_them_reloads_it(url):
    """The agent's passes, checks and recorded ways in write events rows of the course all day, and none of
    them changes a seat or its holder: no reload (the old rule re-read the seats on each). A move after
    them still reloads, and the next sample is credited to the seat's new holder."""
    _course(url, "c1")
    monitor = open_monitor(url, course="c1")
    try:
        assert monitor.seats_if_changed() is not None
        with open_store(url) as store:
            for n in range(25):  # what the agent's passes log (engines/apply.py), a way in, a check
                store.events.log("c1", "engine.apply", detail={"engine": "host", "done": [f"+ key.set {n}"]},
                                 actor="agent", gone_ok=True)  # fmt: skip
            store.delivery.record_delivery("c1", "seat-1", access=Access(kind="ssh", host="gpu1.example.org"))
            checked = Readiness("c1", "seat-1", "ann", "ready", None, "", ("GPU-c1-1",), datetime.now(UTC), "host")
            store.delivery.record_readiness([checked])
        assert not _reloads(monitor)  # the old rule re-read here: the course's newest events row moved
        assert not _reloads(monitor)

        with open_store(url) as store:
            store.seats.move("c1", "ann", "seat-2")
            store.events.log("c1", "engine.apply", detail={"engine": "host"}, actor="agent", gone_ok=True)
        assert _reloads(monitor)  # the move, under the routine row logged after it
        assert not _reloads(monitor)
        ts = int(time.time()) + 5  # after the move, which the store stamps with its own clock
        readings = []
        for entry in monitor.seat_map().entries:
            leaf = Leaf(entry.device_uuid, Gpu(0, entry.device_uuid, "NVIDIA H100", utilization_gpu=50.0))
            readings.append(LeafReading(leaf, entry, ()))
        monitor.write("gpu1", ts, readings)
        assert _credited(url, ts) == {"seat-1": None, "seat-2": "ann", "seat-3": None}
    finally:
        monitor.close()


def test_the_newest_change_is_read_from_the_course_index_after_routine_rows(tmp_path):
    """SQLite's plan of the second statement, asked once the course's newest row is routine: the same index
    read backwards from the top (no scan of events, no sort)."""
    url = f"sqlite:///{tmp_path / 'g.db'}"
    _course(url, "c1")
    monitor = open_monitor(url, course="c1")
    with open_store(url) as store:
        store.events.log("c1", "seat.check", seat="seat-1")
    with _selects(monitor) as caught:
        assert not monitor.refresh()
        assert not monitor.refresh()  # the same newest row: asked of once
    try:
        assert len(caught) == 3, caught
        plan = _plan(monitor, caught[1])
        assert "USING INDEX ix_events_course_id (course_key=?)" in plan, plan
        assert "SCAN events" not in plan and "TEMP B-TREE" not in plan, plan
    finally:
        monitor.close()
