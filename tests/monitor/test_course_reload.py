"""A monitor of one course reads its seats again only when its own course changed.

Twenty courses may share one PostgreSQL store: another course's registration rush or agent writes events
and assignments all the time, and none of it changes this course's seats or holders. ``refresh`` (the
writer's) and ``seats_if_changed`` (the tick's) must leave them alone then, and still re-read on every
change of the course itself: an assign, a move, a release, a seat added or removed, the course archived or
deleted, a course created with the key after the monitor started with none. A monitor of all courses still
re-reads on any course's change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event

from gpuseat.core.roster import RosterText
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


def test_the_course_monitors_question_reads_one_index_entry_of_its_course(tmp_path):
    """SQLite's own plan of the statement ``refresh`` runs: the course's newest events row comes from
    ``ix_events_course_id`` (migration 0020); ``ix_events_course_at`` would read every row of the course."""
    url = f"sqlite:///{tmp_path / 'g.db'}"
    _course(url, "c1")
    monitor = open_monitor(url, course="c1")
    caught: list[tuple[str, Any]] = []

    def on(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if statement.startswith("SELECT"):
            caught.append((statement, parameters))

    engine = monitor._database.engine
    event.listen(engine, "before_cursor_execute", on)
    try:
        monitor.refresh()
    finally:
        event.remove(engine, "before_cursor_execute", on)
    try:
        assert len(caught) == 1, caught  # unchanged: one question, nothing read again
        with engine.connect() as conn:
            plan = " | ".join(
                str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {caught[0][0]}", caught[0][1])
            )
        assert "USING COVERING INDEX ix_events_course_id (course_key=?)" in plan, plan
        assert "SCAN events" not in plan and "SCAN assignments" not in plan, plan
    finally:
        monitor.close()
