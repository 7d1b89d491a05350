"""Migration 0006 (alerts by seat id and course) from a 0005 database with rows in it, on SQLite and PostgreSQL."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import text

import gpuseat.db
from gpuseat.db import make_engine, upgrade
from gpuseat.store import open_store

NOW = "2026-01-05 10:00:00"


def _database_at_0005(url: str) -> None:
    engine = make_engine(url)
    upgrade(engine, "0005")
    with engine.begin() as conn:
        run = lambda sql: conn.execute(text(sql))  # noqa: E731
        for cid, key in ((1, "a"), (2, "b")):
            run(
                "INSERT INTO courses (id, key, name, summary, timezone, created_at, updated_at) "
                f"VALUES ({cid}, '{key}', 'Course {key}', '{{}}', 'UTC', '{NOW}', '{NOW}')"
            )
        seats = ((1, 1, "seat-01", "GPU-a1"), (2, 2, "seat-01", "MIG-b1"), (3, 1, "seat-02", "GPU-a2"))
        for sid, cid, key, device in seats:
            run(
                "INSERT INTO seats (id, course_id, key, kind, device_uuid, groups, engine, state) "
                f"VALUES ({sid}, {cid}, '{key}', 'gpu', '{device}', '[]', 'manual', 'running')"
            )
        run("INSERT INTO devices (id, host, uuid, parent_uuid) VALUES (1, 'h', 'MIG-b1', 'GPU-b')")
        alerts = (
            ("idle", "seat-02", "'seat-02'"),  # one seat has this key: placed
            ("idle", "seat-01", "'seat-01'"),  # two courses have seat-01: cannot be placed
            ("gpu_lost", "GPU-b", "NULL"),  # course b's MIG seat lives on this GPU
            ("gpu_lost", "GPU-zzz", "NULL"),  # no seat on it
        )
        for kind, key, seat in alerts:
            run(
                "INSERT INTO alerts (kind, key, seat, participant, message, raised_at) "
                f"VALUES ('{kind}', '{key}', {seat}, NULL, '{kind} {key}', 1700000000.0)"
            )
    engine.dispose()


def test_upgrade_from_0005_places_existing_alerts(url: str) -> None:
    _database_at_0005(url)
    store = open_store(url)  # upgrades in place
    with store.database.engine.connect() as conn:
        rows = conn.execute(text("SELECT key, seat, seat_id, course_id FROM alerts ORDER BY id")).all()
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() >= "0006"
    assert [tuple(r) for r in rows] == [
        ("seat-02", "seat-02", 3, 1),
        ("seat-01", "seat-01", None, None),
        ("GPU-b", None, None, 2),
        ("GPU-zzz", None, None, None),
    ]
    assert [s.key for s in store.seats.seats("a")] == ["seat-01", "seat-02"]  # nothing else changed
    store.close()


def test_downgrade_to_0005_keeps_the_alerts(url: str) -> None:
    _database_at_0005(url)
    engine = make_engine(url)
    upgrade(engine)

    config = Config()
    config.set_main_option(
        "script_location", str(__import__("pathlib").Path(gpuseat.db.__file__).parent / "migrations")
    )
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":  # as gpuseat.db.upgrade does: a table rebuild must not cascade
            conn.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
        with conn.begin():
            config.attributes["connection"] = conn
            command.downgrade(config, "0005")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM alerts")).scalar() == 4
    engine.dispose()
