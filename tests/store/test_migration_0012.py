"""Migration 0012 (the claim's indexes of free seats in preference order) up and down with rows in it,
on SQLite and PostgreSQL: the claims before and after pick the same seats."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text
from tests.store.test_migration_0011 import NOW, _downgrade

from gpuseat.db import make_engine, upgrade
from gpuseat.store import open_store

INDEXES = {"ix_seats_free_order", "ix_seats_free_reserved"}


def _indexes(conn: object) -> set[str]:
    if conn.dialect.name == "postgresql":  # type: ignore[attr-defined]
        sql = "SELECT indexname FROM pg_indexes WHERE tablename = 'seats' AND schemaname = current_schema()"
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'seats'"
    return {r[0] for r in conn.execute(text(sql))} & INDEXES  # type: ignore[attr-defined]


def _database_at_0011(url: str) -> None:
    """One course: p1 holds g-big; free: an open 80 GB seat, an open 16 GB cloud seat, an open 16 GB
    seat, a 16 GB seat reserved for group "x" (p2's group) and one reserved for group "y"."""
    engine = make_engine(url)
    upgrade(engine, "0011")
    with engine.begin() as conn:
        run = lambda sql: conn.execute(text(sql))  # noqa: E731
        run(
            "INSERT INTO courses (id, key, name, summary, timezone, created_at, updated_at) "
            f"VALUES (1, 'a', 'Course a', '{{}}', 'UTC', '{NOW}', '{NOW}')"
        )
        for pid, grp in ((1, "NULL"), (2, "'x'"), (3, "NULL"), (4, "NULL")):
            run(f"INSERT INTO participants (id, course_id, key, group_name) VALUES ({pid}, 1, 'p{pid}', {grp})")
        seats = [
            (1, "g-big", "gpu", 80, "[]"),
            (2, "g-80", "gpu", 80, "[]"),
            (3, "c-16", "cloud", 16, "[]"),
            (4, "g-16", "gpu", 16, "[]"),
            (5, "r-16x", "gpu", 16, '["x"]'),
            (6, "r-16y", "gpu", 16, '["y"]'),
        ]
        for sid, key, kind, mem, groups in seats:
            run(
                "INSERT INTO seats (id, course_id, key, kind, memory_gb, groups, engine, state) "
                f"VALUES ({sid}, 1, '{key}', '{kind}', {mem}, '{groups}', 'manual', 'planned')"
            )
        run(f"INSERT INTO assignments (seat_id, participant_id, valid_from, mode) VALUES (1, 1, '{NOW}', 'assigned')")
    engine.dispose()


def test_upgrade_adds_the_indexes_and_down_again(url: str, tmp_path: Path) -> None:
    _database_at_0011(url)
    store = open_store(url)  # upgrades in place
    with store.database.engine.connect() as conn:
        assert _indexes(conn) == INDEXES
    assert store.claims.claim_seat("a", "p2", mode="pool").key == "r-16x"  # reserved for the group first
    assert store.claims.claim_seat("a", "p3", mode="pool").key == "g-16"  # then the smallest own seat
    assert store.claims.claim_seat("a", "p1", mode="pool").key == "g-big"  # the seat already held
    store.seats.release("a", participant="p3")
    store.close()

    engine = make_engine(url)
    _downgrade(engine, "0011")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0011"
        assert _indexes(conn) == set()
        assert conn.execute(text("SELECT count(*) FROM assignments WHERE valid_to IS NULL")).scalar() == 2
    engine.dispose()
    store = open_store(url)  # and up again: the claims pick as before
    with store.database.engine.connect() as conn:
        assert _indexes(conn) == INDEXES
    assert store.claims.claim_seat("a", "p3", mode="pool").key == "g-16"
    assert store.claims.claim_seat("a", "p4", mode="pool").key == "g-80"  # own hardware before cloud
    store.close()
