"""Migration 0011 (``seats.taken`` kept by triggers) up and down with rows in it, and every writer of
assignments keeps the flag right, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.exc import DatabaseError

import gpuseat.db
from gpuseat.db import make_engine, upgrade
from gpuseat.errors import InputError
from gpuseat.store import CourseStore, SeatSpec, open_store

NOW = "2026-01-05 10:00:00"
EXAMPLES = Path(__file__).parents[2] / "examples"


def _database_at_0010(url: str) -> None:
    """Course a: seat-01 held, seat-02 once held (closed), seat-03 never; course b (archived): seat-01 held."""
    engine = make_engine(url)
    upgrade(engine, "0010")
    with engine.begin() as conn:
        run = lambda sql: conn.execute(text(sql))  # noqa: E731
        for cid, key in ((1, "a"), (2, "b")):
            run(
                "INSERT INTO courses (id, key, name, summary, timezone, created_at, updated_at) "
                f"VALUES ({cid}, '{key}', 'Course {key}', '{{}}', 'UTC', '{NOW}', '{NOW}')"
            )
            run(f"INSERT INTO participants (id, course_id, key) VALUES ({cid * 10 + 1}, {cid}, 'p1')")
            run(f"INSERT INTO participants (id, course_id, key) VALUES ({cid * 10 + 2}, {cid}, 'p2')")
        for sid, cid, key in ((1, 1, "seat-01"), (2, 1, "seat-02"), (3, 1, "seat-03"), (4, 2, "seat-01")):
            run(
                "INSERT INTO seats (id, course_id, key, kind, groups, engine, state) "
                f"VALUES ({sid}, {cid}, '{key}', 'gpu', '[]', 'manual', 'planned')"
            )
        run(
            "INSERT INTO assignments (seat_id, participant_id, valid_from, valid_to, mode) VALUES "
            f"(1, 11, '{NOW}', NULL, 'assigned'), (2, 12, '{NOW}', '{NOW}', 'pool'), (4, 21, '{NOW}', NULL, 'assigned')"
        )
        run(f"UPDATE courses SET archived_at = '{NOW}' WHERE id = 2")
    engine.dispose()


def _taken(conn: object) -> dict[int, bool]:
    rows = conn.execute(text("SELECT id, taken FROM seats ORDER BY id")).all()  # type: ignore[attr-defined]
    return {int(r[0]): bool(r[1]) for r in rows}


def _consistent(store: CourseStore) -> None:
    """``taken`` is exactly "has an open assignment", for every seat."""
    with store.database.engine.connect() as conn:
        wrong = conn.execute(
            text(
                "SELECT s.id FROM seats s WHERE s.taken <> EXISTS "
                "(SELECT 1 FROM assignments a WHERE a.seat_id = s.id AND a.valid_to IS NULL)"
            )
        ).all()
    assert wrong == []


def _downgrade(engine: object, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(Path(gpuseat.db.__file__).parent / "migrations"))
    with engine.connect() as conn:  # type: ignore[attr-defined]
        if conn.dialect.name == "sqlite":  # as gpuseat.db.upgrade does: a table rebuild must not cascade
            conn.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
        with conn.begin():
            config.attributes["connection"] = conn
            command.downgrade(config, revision)


def test_upgrade_fills_taken_and_down_again(url: str, tmp_path: Path) -> None:
    _database_at_0010(url)
    store = open_store(url)  # upgrades in place
    with store.database.engine.connect() as conn:
        assert _taken(conn) == {1: True, 2: False, 3: False, 4: True}
    # the archived course still refuses changes to its seats, and can still be deleted (its open
    # assignment goes, which frees the seat row that is being deleted too)
    with pytest.raises((DatabaseError, InputError), match="archived"), store.database.engine.begin() as conn:
        conn.execute(text("UPDATE seats SET state = 'failed' WHERE id = 4"))
    got = store.claims.claim_seat("a", "p2", mode="pool")
    assert got.key == "seat-02"
    store.seats.release("a", participant="p1")
    with store.database.engine.begin() as conn:
        assert _taken(conn) == {1: False, 2: True, 3: False, 4: True}
        conn.execute(text("DELETE FROM courses WHERE id = 2"))
        assert _taken(conn) == {1: False, 2: True, 3: False}
    store.close()

    engine = make_engine(url)
    _downgrade(engine, "0010")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0010"
        cols = conn.execute(text("SELECT * FROM seats")).keys()
        assert "taken" not in cols
        assert conn.execute(text("SELECT count(*) FROM assignments WHERE valid_to IS NULL")).scalar() == 1
    with engine.begin() as conn:  # 0010's archive rule for seats is back as it was
        conn.execute(text(f"UPDATE courses SET archived_at = '{NOW}' WHERE id = 1"))
    with pytest.raises((DatabaseError, InputError), match="archived"), engine.begin() as conn:
        conn.execute(text("UPDATE seats SET state = 'failed' WHERE id = 1"))
    engine.dispose()
    store = open_store(url)  # and up again
    with store.database.engine.connect() as conn:
        assert _taken(conn) == {1: False, 2: True, 3: False}
    store.close()


def test_every_writer_keeps_taken_right(store: CourseStore, tmp_path: Path) -> None:
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="c")
    store.roster.import_roster("c", EXAMPLES / "roster-16.csv")
    people = [p.key for p in store.roster.participants("c")]
    store.seats.add_seats("c", [SeatSpec(key=f"g{i:02d}", kind="gpu", memory_gb=80) for i in range(20)])
    _consistent(store)
    store.claims.claim_seat("c", people[0], mode="pool")
    store.seats.assign("c", people[1], "g10")
    _consistent(store)
    store.seats.move("c", people[1], "g11")
    _consistent(store)
    store.seats.assign_all("c", partial=True)
    _consistent(store)
    store.seats.release("c", participant=people[2])
    store.seats.release("c", seat="g11")
    _consistent(store)
    store.lifecycle.remove_seats("c", ["g19"])
    with store.database.engine.begin() as conn:  # a participant removed: their assignments go with them
        conn.execute(text("DELETE FROM participants WHERE key = :k"), {"k": people[3]})
    _consistent(store)
    out = tmp_path / "c.export"
    store.lifecycle.export_course("c", out)
    store.lifecycle.import_course(out, key="d")
    _consistent(store)
    store.lifecycle.archive_course("c")
    store.lifecycle.delete_course("c", export_to=tmp_path / "c2.export")
    _consistent(store)
    assert any(x.participant for x in store.seats.seats("d"))
