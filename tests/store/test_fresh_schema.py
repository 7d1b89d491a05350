"""A new database is made from ``migrations/head.<dialect>.json`` (gpuseat.db.fresh), not by walking every revision:
each file must be what ``scripts/fresh_schema.py`` writes from a walk now, and a database made from it must be what
the walk makes (SQLite: entry for entry; PostgreSQL: the schema dump of the migration snapshots, which reads
columns, keys, indexes, triggers, functions and sequences). Older databases, and a file left behind by a new
revision, still walk."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from gpuseat.db import fresh, make_engine, upgrade
from gpuseat.db.fresh import create_from_schema, schema_file, sqlite_schema
from gpuseat.store import open_store
from pg_schema import PG, pg_schema_url

from .test_migration_snapshots import dump, read_snapshot, snapshot_path

REPO = Path(__file__).parents[2]
EXAMPLES = REPO / "examples"
HOW_TO_FIX = (
    "src/gpuseat/db/migrations/head.*.json are not what the revisions make now (a new revision?): write them again "
    "with `.venv/bin/python scripts/fresh_schema.py --pg URL` and commit them with the revision"
)


def _head() -> str:
    return str(json.loads(schema_file("sqlite").read_text(encoding="utf-8"))["revision"])


def _walked(url: str) -> str:
    engine = make_engine(url)
    upgrade(engine, walk=True)
    engine.dispose()
    return url


def _master(path: Path) -> list[tuple[str, str, str, str | None]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid").fetchall()


def _rows(url: str) -> dict[str, list[tuple[object, ...]]]:
    engine = make_engine(url)
    with engine.connect() as conn:
        tables = sorted(dump_tables(conn))
        rows = {t: [tuple(r) for r in conn.exec_driver_sql(f'SELECT * FROM "{t}"')] for t in tables}
    engine.dispose()
    return rows


def dump_tables(conn: object) -> list[str]:
    from sqlalchemy import inspect

    return list(inspect(conn).get_table_names())


def test_the_files_are_what_a_walk_writes_now(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if not PG:
        pg_schema_url(request)  # fails on CI, skips elsewhere
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "fresh_schema.py"), "--pg", str(PG), "--out", str(tmp_path)],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    for dialect in fresh.DIALECTS:
        written = json.loads((tmp_path / schema_file(dialect).name).read_text(encoding="utf-8"))
        assert json.loads(schema_file(dialect).read_text(encoding="utf-8")) == written, f"{dialect}: {HOW_TO_FIX}"


def test_the_sqlite_file_is_the_walks_sqlite_master(tmp_path: Path) -> None:
    """Checked without PostgreSQL too: the SQLite file's statements are those of a walked database now."""
    engine = make_engine(_walked(f"sqlite:///{tmp_path / 'walk.db'}"))
    with engine.connect() as conn:
        statements = sqlite_schema(conn)
    engine.dispose()
    kept = json.loads(schema_file("sqlite").read_text(encoding="utf-8"))
    assert ["\n".join(lines) for lines in kept["statements"]] == statements, HOW_TO_FIX


def test_a_new_database_is_the_walked_one(url: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    open_store(url, create=True).close()
    if make_url(url).get_backend_name() == "sqlite":
        walked = _walked(f"sqlite:///{tmp_path / 'walk.db'}")
        new_path, walked_path = Path(make_url(url).database or ""), tmp_path / "walk.db"
        assert _master(new_path) == _master(walked_path)  # tables, indexes, triggers: the same SQL, the same order
        with sqlite3.connect(new_path) as conn:
            assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    else:
        walked = _walked(pg_schema_url(request))
    new, old = make_engine(url), make_engine(walked)
    assert dump(new) == dump(old) == read_snapshot(snapshot_path(new.dialect.name, _head()))
    new.dispose()
    old.dispose()
    assert _rows(url) == _rows(walked) == {**{t: [] for t in _rows(walked)}, "alembic_version": [(_head(),)]}


def test_a_new_database_works_as_a_store(url: str) -> None:
    """What the file makes acts as the walk's schema does: a course and roster are stored, and an archived
    course refuses a new participant (the archive triggers of revision 0010)."""
    store = open_store(url, create=True)
    store.courses.create_course(EXAMPLES / "course-2016.toml", key="lab")
    store.roster.import_roster("lab", EXAMPLES / "roster-16.csv")
    assert len(store.roster.participants("lab")) == 16
    store.close()
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE courses SET archived_at = CURRENT_TIMESTAMP WHERE key = 'lab'")
    with pytest.raises(Exception, match="archived"), engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO participants (key, course_id) SELECT 'zed', id FROM courses WHERE key = 'lab'"
        )
    engine.dispose()


def test_a_file_of_an_older_revision_is_not_used(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """A revision added without writing the files again: new databases walk the revisions (and still end at
    the head), never get the older schema."""
    dialect = make_url(url).get_backend_name()
    data = json.loads(schema_file(dialect).read_text(encoding="utf-8"))
    head, data["revision"] = data["revision"], "0019"
    (tmp_path / schema_file(dialect).name).write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.setattr(fresh, "schema_file", lambda d: tmp_path / f"head.{d}.json")
    engine = make_engine(url)
    with engine.begin() as conn:
        assert create_from_schema(conn, {head}) is False
    with engine.connect() as conn:
        assert dump_tables(conn) == []
    engine.dispose()
    open_store(url, create=True).close()
    new = make_engine(url)
    assert dump(new) == read_snapshot(snapshot_path(dialect, head))
    new.dispose()


def test_a_database_with_anything_in_it_is_never_given_the_file(url: str) -> None:
    """Only a new database gets the file: one at an older revision is upgraded by the walk."""
    engine = make_engine(url)
    upgrade(engine, "0019")
    with engine.begin() as conn:
        assert create_from_schema(conn, {_head()}) is False
    engine.dispose()
    open_store(url, create=True).close()
    new = make_engine(url)
    assert dump(new) == read_snapshot(snapshot_path(new.dialect.name, _head()))
    new.dispose()
