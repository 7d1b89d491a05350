"""A new database gets the newest schema from one file instead of a walk through every revision.

Walking the Alembic revisions one by one (twenty of them, several rebuilding tables in SQLite's batch mode)
costs about 0.12 s of CPU in the first ``gpuseat course create`` of a new data folder, and in every test
that opens a new store; on PostgreSQL about 0.13 s of CPU and 0.3 s in all. Executing the statements they
end with costs about 0.014 s (SQLite) and 0.14 s (PostgreSQL, 0.02 s of it CPU here). The files,
``migrations/head.<dialect>.json``, are data made by a walk with ``scripts/fresh_schema.py``:

- ``head.sqlite.json``: the ``sqlite_master`` of a database the revisions made, each ``CREATE`` as SQLite
  stored it, in the order SQLite stored them;
- ``head.postgresql.json``: the DDL statements (``CREATE``, ``ALTER``, ``DROP``) the walk ran on a new
  schema, in order; its other statements read or change rows, of which a new database has none. No name
  in them is qualified by a schema, so they make the schema of the connection's ``search_path``;

each with the revision it stands for. A file is used only for a database with nothing in it (SQLite: no
table, index or trigger; PostgreSQL: no table, sequence, view or function in the current schema), and
only while its revision is the newest; any other database (an older schema, a new revision not yet
written to the file) walks the revisions as before. ``tests/store/test_fresh_schema.py`` writes the files
again and compares, and makes a database both ways and compares them, so a new revision fails that test
until the files are written again (``.venv/bin/python scripts/fresh_schema.py``, with a PostgreSQL URL).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["DIALECTS", "create_from_schema", "schema_file", "sqlite_schema"]

#: the databases a file is written for
DIALECTS = ("sqlite", "postgresql")
#: the entries SQLite makes itself (sqlite_sequence; the automatic indexes of UNIQUE and PRIMARY KEY have no SQL)
_OWN = "sqlite_"
#: anything of the current schema: a database with one of these is not new
_NOT_NEW = {
    "sqlite": "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
    "postgresql": (
        "SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace)"
        " + (SELECT count(*) FROM pg_proc WHERE pronamespace = current_schema()::regnamespace)"
    ),
}


def schema_file(dialect: str) -> Path:
    """Where the newest schema of ``dialect`` is kept (packaged with the migrations)."""
    return Path(__file__).parent / "migrations" / f"head.{dialect}.json"


def sqlite_schema(conn: Any) -> list[str]:
    """Every ``CREATE`` of ``sqlite_master`` of ``conn`` (a SQLite connection) that SQLite did not make itself,
    in the order SQLite stored them: the statements of ``head.sqlite.json``."""
    rows = conn.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid")
    return [str(sql) for name, sql in rows if not name.startswith(_OWN)]


def _read(dialect: str) -> tuple[str, list[str]] | None:
    """The file's revision and its statements; None when the package has none for ``dialect``."""
    try:
        data = json.loads(schema_file(dialect).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return str(data["revision"]), ["\n".join(lines) for lines in data["statements"]]


def create_from_schema(conn: Any, heads: set[str]) -> bool:
    """On a new database, inside the caller's migration transaction: create the newest schema from the file
    and record its revision. False (nothing done) when there is no file for the database, the database is
    not new, or the file is not of ``heads`` (a newer revision came since it was written)."""
    from sqlalchemy import text

    dialect = conn.dialect.name
    schema = _read(dialect) if dialect in DIALECTS else None
    if schema is None or {schema[0]} != heads:
        return False
    if conn.exec_driver_sql(_NOT_NEW[dialect]).scalar():
        return False
    revision, statements = schema
    for statement in statements:
        conn.exec_driver_sql(statement)
    conn.execute(text("INSERT INTO alembic_version (version_num) VALUES (:revision)"), {"revision": revision})
    return True
