"""A new SQLite database gets the newest schema from one file instead of a walk through every revision.

Walking the Alembic revisions one by one (twenty of them, several rebuilding tables in SQLite's batch
mode) costs about 0.12 s of CPU in the first ``gpuseat course create`` of a new data folder, and in every
test that opens a new store; executing the 88 ``CREATE`` statements they end with costs about 0.014 s.
The file, ``migrations/head.sqlite.json``, is data made by a walk: the ``sqlite_master`` of a database the
revisions made (each ``CREATE`` as SQLite stored it, in the order SQLite stored them, as a list of lines)
and the revision it stands for. It is used only for a database with no tables at all, and only while that
revision is the newest; any other database (an older schema, a new revision not yet in the file,
PostgreSQL) walks the revisions as before. ``tests/store/test_fresh_schema.py`` makes a database both ways
and compares them entry by entry, so a new revision fails that test until the file is written again with
``.venv/bin/python scripts/fresh_schema.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA", "create_from_schema", "schema_of"]

SCHEMA = Path(__file__).parent / "migrations" / "head.sqlite.json"
#: the entries SQLite makes itself (sqlite_sequence; the automatic indexes of UNIQUE and PRIMARY KEY have no SQL)
_OWN = "sqlite_"


def schema_of(conn: Any) -> dict[str, Any]:
    """What the file holds for the schema of ``conn`` (a SQLite connection at one revision): that revision,
    and every ``CREATE`` of ``sqlite_master`` that SQLite did not make itself, in order, as lists of lines."""
    revision = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar_one()
    rows = conn.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid")
    statements = [sql.split("\n") for name, sql in rows if not name.startswith(_OWN)]
    return {"revision": revision, "made_by": "scripts/fresh_schema.py", "statements": statements}


def _read() -> tuple[str, list[str]] | None:
    """The file's revision and its statements; None when the package has none."""
    try:
        data = json.loads(SCHEMA.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return str(data["revision"]), ["\n".join(lines) for lines in data["statements"]]


def create_from_schema(conn: Any, heads: set[str]) -> bool:
    """On a SQLite database with no tables, inside the caller's migration transaction: create the newest
    schema from the file and record its revision. False (nothing done) when the database is not SQLite,
    already has tables, or the file is not of ``heads`` (a newer revision came since it was written)."""
    if conn.dialect.name != "sqlite":
        return False
    schema = _read()
    if schema is None or {schema[0]} != heads:
        return False
    if conn.exec_driver_sql("SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'").scalar():
        return False
    revision, statements = schema
    for statement in statements:
        conn.exec_driver_sql(statement)
    conn.exec_driver_sql("INSERT INTO alembic_version (version_num) VALUES (?)", (revision,))
    return True
