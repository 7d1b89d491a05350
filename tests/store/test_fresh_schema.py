"""A new SQLite database is made from ``migrations/head.sqlite.json`` (gpuseat.db.fresh), not by walking every
revision: the file must stand for the newest revision, and what it makes must be, entry for entry, what the
walk makes. Older databases, and a file left behind by a new revision, still walk."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from gpuseat.db import fresh, make_engine, upgrade
from gpuseat.db.fresh import SCHEMA, create_from_schema, schema_of
from gpuseat.store import open_store

HOW_TO_FIX = (
    "src/gpuseat/db/migrations/head.sqlite.json is not what the revisions make now (a new revision?): write it "
    "again with `.venv/bin/python scripts/fresh_schema.py` and commit it with the revision"
)


def _master(path: Path) -> list[tuple[str, str, str, str | None]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid").fetchall()


def _rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    with sqlite3.connect(path) as conn:
        tables = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: conn.execute(f'SELECT * FROM "{t}"').fetchall() for t in tables}


def _walked(path: Path) -> Path:
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine, walk=True)
    engine.dispose()
    return path


def _head() -> str:
    return str(json.loads(SCHEMA.read_text(encoding="utf-8"))["revision"])


def test_the_file_is_what_the_revisions_make_now(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{_walked(tmp_path / 'walk.db')}")
    with engine.connect() as conn:
        made = schema_of(conn)
    engine.dispose()
    assert json.loads(SCHEMA.read_text(encoding="utf-8")) == made, HOW_TO_FIX


def test_a_new_database_is_entry_for_entry_the_walked_one(tmp_path: Path) -> None:
    walked = _walked(tmp_path / "walk.db")
    new = tmp_path / "new.db"
    open_store(f"sqlite:///{new}", create=True).close()
    assert _master(new) == _master(walked)  # tables, indexes, triggers: the same SQL in the same order
    assert _rows(new) == _rows(walked)  # alembic_version at the head, every other table empty
    with sqlite3.connect(new) as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_new_database_works_as_a_store(tmp_path: Path) -> None:
    """The triggers the file makes act: an archived course refuses a new participant."""
    examples = Path(__file__).parents[2] / "examples"
    store = open_store(f"sqlite:///{tmp_path / 'c.db'}", create=True)
    store.courses.create_course(examples / "course-2016.toml", key="lab")
    store.roster.import_roster("lab", examples / "roster-16.csv")
    assert len(store.roster.participants("lab")) == 16
    store.close()
    with sqlite3.connect(tmp_path / "c.db") as conn:
        conn.execute("UPDATE courses SET archived_at = '2026-01-01 00:00:00' WHERE key = 'lab'")
        with pytest.raises(sqlite3.IntegrityError, match="archived"):
            conn.execute("INSERT INTO participants (key, course_id) SELECT 'zed', id FROM courses WHERE key = 'lab'")


def test_a_file_of_an_older_revision_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A revision added without writing the file again: new databases walk the revisions (and still end at
    the head), never get the older schema."""
    data = json.loads(SCHEMA.read_text(encoding="utf-8"))
    head, data["revision"] = data["revision"], "0019"
    stale = tmp_path / "head.sqlite.json"
    stale.write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.setattr(fresh, "SCHEMA", stale)
    engine = make_engine(f"sqlite:///{tmp_path / 'a.db'}")
    with engine.begin() as conn:
        assert create_from_schema(conn, {head}) is False
        assert conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar() == 0
    engine.dispose()
    new = tmp_path / "new.db"
    open_store(f"sqlite:///{new}", create=True).close()
    assert _master(new) == _master(_walked(tmp_path / "walk.db"))


def test_a_database_with_tables_is_never_given_the_file(tmp_path: Path) -> None:
    """Only an empty database gets the file: one at an older revision is upgraded by the walk."""
    path = tmp_path / "old.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine, "0019")
    with engine.begin() as conn:
        assert create_from_schema(conn, {_head()}) is False
    engine.dispose()
    open_store(f"sqlite:///{path}", create=True).close()
    assert {row[1] for row in _master(path)} == {row[1] for row in _master(_walked(tmp_path / "walk.db"))}
