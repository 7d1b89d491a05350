"""Migration 0013 (an assignment never ends before it starts) up and down with rows in it, on SQLite and
PostgreSQL: a row a stepped clock stored backwards is closed at its start (an archived course's too), and
the database then refuses any write of such a row, whatever code path tries it."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from tests.store.test_migration_0011 import NOW, _downgrade

from gpuseat.db import make_engine, upgrade

EARLIER = "2026-01-05 09:00:00"


def _database_at_0012(url: str) -> object:
    """Course a (archived): p1 held s1 from NOW to an hour *before* NOW (a clock stepped back)."""
    engine = make_engine(url)
    upgrade(engine, "0012")
    with engine.begin() as conn:
        run = lambda sql: conn.execute(text(sql))  # noqa: E731
        run(
            "INSERT INTO courses (id, key, name, summary, timezone, created_at, updated_at) "
            f"VALUES (1, 'a', 'Course a', '{{}}', 'UTC', '{NOW}', '{NOW}')"
        )
        run("INSERT INTO participants (id, course_id, key) VALUES (1, 1, 'p1'), (2, 1, 'p2')")
        run(
            "INSERT INTO seats (id, course_id, key, kind, groups, engine, state) "
            "VALUES (1, 1, 's1', 'gpu', '[]', 'manual', 'planned')"
        )
        run(
            "INSERT INTO assignments (seat_id, participant_id, valid_from, valid_to, mode) "
            f"VALUES (1, 1, '{NOW}', '{EARLIER}', 'assigned')"
        )
        run(f"UPDATE courses SET archived_at = '{NOW}' WHERE id = 1")
    return engine


def _interval(engine: object) -> tuple[str, str]:
    with engine.connect() as conn:  # type: ignore[attr-defined]
        row = conn.execute(text("SELECT valid_from, valid_to FROM assignments WHERE participant_id = 1")).one()
    return str(row[0])[:19], str(row[1])[:19]


BACKWARDS = [
    "INSERT INTO assignments (seat_id, participant_id, valid_from, valid_to, mode) "
    "VALUES (1, 2, '2026-01-06 10:00:00.000002', '2026-01-06 10:00:00.000001', 'assigned')",
    f"UPDATE assignments SET valid_to = '{EARLIER}' WHERE participant_id = 1",
]


def test_upgrade_repairs_backwards_rows_and_refuses_new_ones(url: str) -> None:
    engine = _database_at_0012(url)
    upgrade(engine, "0013")
    assert _interval(engine) == (NOW, NOW)  # closed at its start, though the course is archived
    with engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(text("UPDATE courses SET archived_at = NULL WHERE id = 1"))
    for sql in BACKWARDS:
        with pytest.raises(IntegrityError) as err, engine.begin() as conn:  # type: ignore[attr-defined]
            conn.execute(text(sql))
        assert "ck_assignments_interval" in str(err.value) or "cannot end before it starts" in str(err.value)
    with engine.begin() as conn:  # type: ignore[attr-defined]  # an instant, or forward: stored
        conn.execute(text(f"UPDATE assignments SET valid_to = '{NOW}' WHERE participant_id = 1"))
        conn.execute(
            text(
                "INSERT INTO assignments (seat_id, participant_id, valid_from, valid_to, mode) "
                "VALUES (1, 2, '2026-01-06 10:00:00', '2026-01-06 11:00:00', 'assigned')"
            )
        )
    engine.dispose()  # type: ignore[attr-defined]


def test_archive_rule_survives_the_repair(url: str) -> None:
    engine = _database_at_0012(url)
    upgrade(engine, "0013")
    with pytest.raises(Exception) as err, engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(text(f"UPDATE assignments SET valid_to = '{NOW}', ended_by = 'x' WHERE participant_id = 1"))
    assert "archived" in str(err.value)
    engine.dispose()  # type: ignore[attr-defined]


def test_downgrade_drops_the_guard(url: str) -> None:
    engine = _database_at_0012(url)
    upgrade(engine, "0013")
    _downgrade(engine, "0012")
    with engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(text("UPDATE courses SET archived_at = NULL WHERE id = 1"))
        conn.execute(text(BACKWARDS[0]))  # no guard any more
    upgrade(engine, "0013")  # and up again: the new backwards row is repaired too
    with engine.connect() as conn:  # type: ignore[attr-defined]
        bad = conn.execute(text("SELECT count(*) FROM assignments WHERE valid_to < valid_from")).scalar()
    assert bad == 0
    engine.dispose()  # type: ignore[attr-defined]
