"""Upgrading a course database made by the previous schema (0001) keeps the monitor's rows."""

from __future__ import annotations

from pathlib import Path

from alembic.script import ScriptDirectory
from sqlalchemy import text

import gpuseat.db
from gpuseat.db import make_engine, upgrade
from gpuseat.store import SeatSpec, open_monitor, open_store

HEAD = ScriptDirectory(str(Path(gpuseat.db.__file__).parent / "migrations")).get_current_head()

T = "2026-01-05 10:00:00"


def old_database(url: str) -> None:
    engine = make_engine(url)
    upgrade(engine, "0001")
    with engine.begin() as conn:
        run = lambda sql: conn.execute(text(sql))  # noqa: E731
        run("INSERT INTO participants (key, name, unix_user) VALUES ('alice', 'Alice', 'al'), ('bob', NULL, NULL)")
        run(
            "INSERT INTO seats (key, host, device_uuid, profile) VALUES "
            "('seat-01', 'gpu1', 'MIG-aaa', '3g.40gb'), ('seat-02', 'gpu1', 'GPU-bbb', NULL), "
            "('seat-03', 'gpu1', 'MIG-ccc', '1g.10gb')"
        )
        # bob holds two seats at once (the old schema allowed it); alice had a closed assignment
        run(
            f"INSERT INTO assignments (seat_id, participant_id, valid_from, valid_to) VALUES "
            f"(3, 1, '{T}', '{T}'), (1, 1, '{T}', NULL), (2, 2, '{T}', NULL), (3, 2, '{T}', NULL)"
        )
        run("INSERT INTO devices (host, uuid, name) VALUES ('gpu1', 'MIG-aaa', 'H100'), ('gpu1', 'GPU-bbb', 'H100')")
        run(
            "INSERT INTO samples (ts, device_id, seat_id, participant_id, memory_used_mib, processes, "
            "foreign_processes, active) VALUES (1700000000, 1, 1, 1, 2048, 1, 0, true), "
            "(1700000000, 2, 2, 2, 0, 0, 0, false)"
        )
        run(
            "INSERT INTO minute_aggregates (minute, device_id, seat_id, participant_id, samples, active_samples) "
            "VALUES (28333333, 1, 1, 1, 12, 12)"
        )
        run(
            "INSERT INTO alerts (kind, key, seat, participant, message, raised_at) "
            "VALUES ('idle', 'seat-02', 'seat-02', 'bob', 'idle 24 h', 1700000000.0)"
        )
    engine.dispose()


def test_upgrade_from_0001_keeps_monitor_rows(url):
    old_database(url)
    store = open_store(url)  # a read command may upgrade an existing gpuseat database
    with store.database.engine.connect() as conn:
        one = lambda sql: conn.execute(text(sql)).all()  # noqa: E731
        assert one("SELECT version_num FROM alembic_version") == [(HEAD,)]
        assert one("SELECT seat_id, participant_id, memory_used_mib FROM samples ORDER BY id") == [
            (1, 1, 2048),
            (2, 2, 0),
        ]
        assert one("SELECT seat_id, participant_id, samples FROM minute_aggregates") == [(1, 1, 12)]
        assert one("SELECT count(*) FROM alerts") == [(1,)]
        assert one("SELECT count(*) FROM devices") == [(2,)]
        # bob's older open assignment was closed so the new unique indexes hold; the rest is unchanged
        assert one("SELECT id, valid_to IS NULL, ended_by FROM assignments ORDER BY id") == [
            (1, False, None),
            (2, True, None),
            (3, False, "migration"),
            (4, True, None),
        ]
    course = store.courses.get_course()
    assert course.key == "default" and (course.participants, course.seats, course.assigned) == (2, 3, 2)
    seats = {s.key: s for s in store.seats.seats()}
    assert (seats["seat-01"].kind, seats["seat-01"].participant, seats["seat-01"].state) == ("mig", "alice", "running")
    assert (seats["seat-02"].kind, seats["seat-02"].participant) == ("gpu", None)
    assert seats["seat-03"].participant == "bob"
    assert store.roster.find_participant(None, "al").key == "alice"
    assert [h.seat for h in store.seats.history(None, participant="alice")] == ["seat-03", "seat-01"]
    # the upgraded store works: new seats, claims, and the monitor's seat map
    store.seats.add_seats(None, [SeatSpec(key="seat-04", kind="gpu", device_uuid="GPU-ddd")])
    store.seats.release(None, participant="bob")
    assert store.claims.claim_seat(None, "bob").key == "seat-02"
    store.close()
    monitor = open_monitor(url)
    entries = {e.seat: e for e in monitor.seat_map(course="default").entries}
    assert entries["seat-01"].participant == "alice" and entries["seat-01"].login == "al"
    assert entries["seat-02"].participant == "bob"
    monitor.close()


def test_upgrade_of_an_empty_0001_database_creates_no_course(url):
    engine = make_engine(url)
    upgrade(engine, "0001")
    engine.dispose()
    with open_store(url) as store:
        assert store.courses.list_courses() == []


def test_known_revisions_match_alembic():
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from gpuseat.store.opening import _known_revisions

    config = Config()
    config.set_main_option("script_location", str(Path(gpuseat.db.__file__).parent / "migrations"))
    script = ScriptDirectory.from_config(config)
    known, heads = _known_revisions()
    assert known == {s.revision for s in script.walk_revisions()}
    assert heads == set(script.get_heads()) and len(heads) == 1


def test_stores_opened_from_many_threads_at_once_read_the_migrations_once(tmp_path):
    """The hub hooks open stores from worker threads; the packaged migrations are read by one thread,
    once per process (CPython 3.11's ``ast.parse`` is not safe to run in two threads at once)."""
    import threading

    from gpuseat.store.opening import _read_revisions

    url = f"sqlite:///{tmp_path / 'c.db'}"
    open_store(url, create=True).close()
    _read_revisions.cache_clear()
    start, errors = threading.Barrier(8), []

    def open_one() -> None:
        start.wait()
        try:
            open_store(url).close()
        except Exception as exc:  # collected and shown below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _read_revisions.cache_info().misses == 1
