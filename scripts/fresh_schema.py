"""Write ``src/gpuseat/db/migrations/head.sqlite.json`` and ``head.postgresql.json`` (gpuseat.db.fresh) from a
walk of every revision on a new SQLite database and on a new schema of a PostgreSQL server. Run it after adding
a revision; tests/store/test_fresh_schema.py fails until the files stand for the newest revision:

    .venv/bin/python scripts/fresh_schema.py --pg 'postgresql+psycopg://gpuseat@/gpuseat_test?host=/tmp/pg'

``--pg`` defaults to ``GPUSEAT_TEST_PG_URL`` (a throwaway server: ``bash scripts/postgres.sh start DIR``); a
schema of its own is made there and dropped. ``--out DIR`` writes the files there instead (the test's use).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, text

from gpuseat.db import make_engine, upgrade
from gpuseat.db.fresh import schema_file, sqlite_schema

#: the statements of a walk that make the schema; the others read or change rows (a new database has none)
DDL = ("CREATE", "ALTER", "DROP")


def _document(revision: str, statements: list[str]) -> str:
    data = {
        "revision": revision,
        "made_by": "scripts/fresh_schema.py",
        "statements": [s.split("\n") for s in statements],
    }
    return json.dumps(data, indent=1) + "\n"


def _revision(engine: Any) -> str:
    with engine.connect() as conn:
        return str(conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one())


def sqlite_file() -> str:
    """``head.sqlite.json``: the sqlite_master a walk ends with."""
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'walk.db'}", create=True)
        upgrade(engine, walk=True)
        with engine.connect() as conn:
            statements = sqlite_schema(conn)
        revision = _revision(engine)
        engine.dispose()
    return _document(revision, statements)


def postgresql_file(url: str) -> str:
    """``head.postgresql.json``: the DDL a walk runs on a new schema of the server at ``url``."""
    admin = create_engine(url)
    schema = f"gpuseat_fresh_{uuid.uuid4().hex[:12]}"
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        sep = "&" if "?" in url else "?"
        engine = make_engine(f"{url}{sep}options=-csearch_path%3D{schema}")
        ran: list[str] = []

        def keep(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
            if statement.lstrip().split(None, 1)[0].upper() in DDL:
                if parameters:
                    raise SystemExit(f"a DDL statement with parameters cannot be kept: {statement[:200]}")
                if schema in statement:
                    raise SystemExit(f"a DDL statement names its schema: {statement[:200]}")
                ran.append(statement)

        event.listen(engine, "before_cursor_execute", keep)
        upgrade(engine, walk=True)
        event.remove(engine, "before_cursor_execute", keep)
        revision = _revision(engine)
        engine.dispose()
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
    return _document(revision, ran)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", default=os.environ.get("GPUSEAT_TEST_PG_URL"), help="a PostgreSQL URL (a throwaway)")
    parser.add_argument("--out", type=Path, help="write the files here instead of into the package")
    args = parser.parse_args()
    if not args.pg:
        parser.error("give --pg URL (or set GPUSEAT_TEST_PG_URL): both files are written together")
    for dialect, made in (("sqlite", sqlite_file()), ("postgresql", postgresql_file(args.pg))):
        path = args.out / schema_file(dialect).name if args.out else schema_file(dialect)
        path.write_text(made, encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
