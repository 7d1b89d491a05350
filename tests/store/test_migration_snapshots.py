"""Every revision makes, step by step, exactly the schema in its snapshot; down from head ends empty.

The revisions in ``gpuseat/db/migrations/versions/`` build their columns through the frozen helpers of
``gpuseat/db/migrations/columns.py``: a change to a helper (or to a shipped revision) would silently change
what a revision makes on a new database, and so make a database created today differ from one upgraded
from an older release. This test pins it down: on SQLite (always) and PostgreSQL (``GPUSEAT_TEST_PG_URL``)
it upgrades one revision at a time from base to head and, after each, compares a normalised dump of the
schema with ``migration_schemas/<dialect>/<revision>.txt``.

The snapshots of 0001–0015 were made from the revisions as they were before the helpers: each file of
``git show b011834^:src/gpuseat/db/migrations/versions/`` written to a temporary folder, given to
:func:`alembic_config` as ``versions``, walked and dumped as here. The current revisions give the same
dumps (this test), on both databases.

The dump is one self-contained line per thing: per table its columns (type, nullability, default) in
table order, then, sorted, its primary key, foreign keys (with ``ON DELETE``), unique constraints,
checks, indexes (with ``WHERE``) and triggers; on PostgreSQL also the functions and sequences. Constraint
lines are sorted because Alembic's SQLite batch rebuild writes them in no fixed order. Alembic's own
``alembic_version`` table is left out.

A new revision's snapshot is written (never overwritten) with
``GPUSEAT_TEST_WRITE_SNAPSHOTS=1 .venv/bin/python -m pytest -p no:randomly tests/store/test_migration_snapshots.py``
(with ``GPUSEAT_TEST_PG_URL`` set, for both databases).
"""

from __future__ import annotations

import difflib
import itertools
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine

import gpuseat.db
from gpuseat.db import make_engine

REPO = Path(__file__).parents[2]
SNAPSHOTS = Path(__file__).parent / "migration_schemas"
MIGRATIONS = Path(gpuseat.db.__file__).parent / "migrations"
WRITE = os.environ.get("GPUSEAT_TEST_WRITE_SNAPSHOTS") == "1"
HOW_TO_FIX = (
    "A revision that has shipped must keep making exactly this schema, on every database it ever runs on. "
    "If you changed that revision or a helper in src/gpuseat/db/migrations/columns.py (frozen), undo the "
    "change and make it in a NEW revision instead (a helper that must return something else becomes a new "
    "helper). Never edit an existing snapshot in tests/store/migration_schemas/; a new revision's snapshot is "
    "written with GPUSEAT_TEST_WRITE_SNAPSHOTS=1 .venv/bin/python -m pytest -p no:randomly "
    "tests/store/test_migration_snapshots.py (with GPUSEAT_TEST_PG_URL set, for both databases)."
)


def alembic_config(versions: Path | None = None) -> Config:
    """Gpuseat's migrations; ``versions`` puts another folder of revisions in place of the packaged ones."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if versions is not None:
        config.set_main_option("version_locations", str(versions))
    return config


def revisions(config: Config) -> list[str]:
    """The revision ids from base to head."""
    return [s.revision for s in ScriptDirectory.from_config(config).walk_revisions()][::-1]


def migrate(engine: Engine, config: Config, step: Callable[[Config, str], None], target: str) -> None:
    """One Alembic step in its own transaction, as ``gpuseat.db.upgrade`` runs it (on SQLite with foreign
    keys off, so that a table rebuild does not cascade)."""
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            conn.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
        with conn.begin():
            config.attributes["connection"] = conn
            step(config, target)


def _options(options: dict[str, Any]) -> str:
    return "".join(f" {k}={' '.join(str(v).split())}" for k, v in sorted(options.items()) if v not in (None, []))


def _names(columns: list[Any]) -> str:
    return ", ".join(str(c) for c in columns)


def _table_lines(conn: Connection, table: str) -> list[str]:
    """The table's columns in their order, then its constraints, indexes and triggers, sorted."""
    inspector = inspect(conn)
    columns = []
    for c in inspector.get_columns(table):
        line = f"column {c['name']} {c['type'].compile(dialect=conn.dialect)}"
        line += " NULL" if c["nullable"] else " NOT NULL"
        if c.get("default") is not None:
            line += f" DEFAULT {c['default']}"
        for extra in ("computed", "identity"):
            if c.get(extra):
                line += f" {extra.upper()} {c[extra]}"
        columns.append(line)
    rest = []
    pk = inspector.get_pk_constraint(table)
    if pk["constrained_columns"]:
        rest.append(f"primary key {pk['name']} ({_names(pk['constrained_columns'])})")
    for fk in inspector.get_foreign_keys(table):
        rest.append(
            f"foreign key {fk['name']} ({_names(fk['constrained_columns'])}) -> "
            f"{fk['referred_table']} ({_names(fk['referred_columns'])}){_options(fk['options'])}"
        )
    for uq in inspector.get_unique_constraints(table):
        rest.append(f"unique {uq['name']} ({_names(uq['column_names'])})")
    for ck in inspector.get_check_constraints(table):
        rest.append(f"check {ck['name']} ({' '.join(ck['sqltext'].split())})")
    if conn.dialect.name == "sqlite":  # the indexes' SQL: reflection skips those on expressions
        rest.extend(f"index {name}: {sql}" for name, sql in _sqlite_master(conn, "index", table))
        rest.extend(f"trigger {name}: {sql}" for name, sql in _sqlite_master(conn, "trigger", table))
        return [f"{table}: {line}" for line in columns + sorted(rest)]
    for ix in inspector.get_indexes(table):
        if ix.get("duplicates_constraint"):  # the index behind a unique constraint above
            continue
        expressions = ix.get("expressions") or ix["column_names"]  # a None column is an expression
        what = [e if c is None else c for c, e in zip(ix["column_names"], expressions, strict=True)]
        unique = " UNIQUE" if ix["unique"] else ""
        rest.append(f"index {ix['name']} ({_names(what)}){unique}{_options(ix.get('dialect_options', {}))}")
    rest.extend(f"trigger {name}: {sql}" for name, sql in _pg_triggers(conn, table))
    return [f"{table}: {line}" for line in columns + sorted(rest)]


def _sqlite_master(conn: Connection, kind: str, table: str) -> list[tuple[str, str]]:
    """The SQL of the table's indexes or triggers (SQLite's own, for unique constraints, left out)."""
    sql = "SELECT name, sql FROM sqlite_master WHERE type = :k AND tbl_name = :t AND sql IS NOT NULL"
    return [(name, " ".join(body.split())) for name, body in conn.execute(text(sql), {"k": kind, "t": table})]


def _pg_triggers(conn: Connection, table: str) -> list[tuple[str, str]]:
    sql = (
        "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal "
        "AND tgrelid = CAST(:t AS regclass)"
    )
    return [(name, " ".join(body.split())) for name, body in conn.execute(text(sql), {"t": table})]


def _postgresql_lines(conn: Connection) -> list[str]:
    """The functions and sequences of the test's schema."""
    lines = [
        f"function {name}: {' '.join(body.split())}"
        for name, body in conn.execute(
            text(
                "SELECT proname, pg_get_functiondef(oid) FROM pg_proc "
                "WHERE pronamespace = CAST(current_schema() AS regnamespace)"
            )
        )
    ]
    lines += [
        f"sequence {name} {data_type}"
        for name, data_type in conn.execute(
            text(
                "SELECT sequence_name, data_type FROM information_schema.sequences "
                "WHERE sequence_schema = current_schema()"
            )
        )
    ]
    return sorted(lines)


def dump(engine: Engine) -> list[str]:
    """The schema as sorted, self-contained lines (Alembic's ``alembic_version`` left out)."""
    with engine.connect() as conn, warnings.catch_warnings():
        # SQLite's reflection skips (and warns about) indexes on expressions; _sqlite_master has their SQL
        warnings.filterwarnings("ignore", "Skipped unsupported reflection of expression-based index")
        tables = sorted(t for t in inspect(conn).get_table_names() if t != "alembic_version")
        lines = [line for t in tables for line in _table_lines(conn, t)]
        if conn.dialect.name == "postgresql":
            lines += _postgresql_lines(conn)
            schema = conn.execute(text("SELECT current_schema()")).scalar_one()  # each test has its own
            lines = [line.replace(f"{schema}.", "<schema>.") for line in lines]
    return lines


def snapshot_path(dialect: str, revision: str) -> Path:
    return SNAPSHOTS / dialect / f"{revision}.txt"


def read_snapshot(path: Path) -> list[str]:
    """The snapshot's lines, its ``#`` comment lines left out."""
    return [line for line in path.read_text().splitlines() if not line.startswith("#")]


def write_snapshot(path: Path, dialect: str, revision: str, lines: list[str], origin: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = [
        f"# the schema after upgrading step by step to revision {revision} on {dialect}, {origin}",
        "# never edit: a change to the schema is a new revision (tests/store/test_migration_snapshots.py)",
    ]
    path.write_text("\n".join(header + lines) + "\n")


def difference(what: str, path: Path, expected: list[str], got: list[str]) -> str:
    """Which step, which lines, and how to fix it."""
    diff = difflib.unified_diff(
        expected, got, f"{path.relative_to(REPO)} (snapshot)", "the schema the revisions make now", n=1
    )
    return (
        f"{what}; these lines differ (- snapshot, + now):\n" + "\n".join(d.rstrip() for d in diff) + f"\n\n{HOW_TO_FIX}"
    )


def test_each_revision_makes_its_snapshot(url: str) -> None:
    """Base to head one revision at a time; after each, the schema is that revision's snapshot."""
    engine = make_engine(url)
    config = alembic_config()
    dialect = engine.dialect.name
    try:
        for revision in revisions(config):
            migrate(engine, config, command.upgrade, revision)
            got = dump(engine)
            path = snapshot_path(dialect, revision)
            if not path.exists():
                if not WRITE:
                    pytest.fail(
                        f"revision {revision} has no snapshot on {dialect} ({path.relative_to(REPO)}).\n\n{HOW_TO_FIX}",
                        pytrace=False,
                    )
                write_snapshot(path, dialect, revision, got, "written by the test")
            expected = read_snapshot(path)
            what = f"revision {revision} no longer makes its schema on {dialect} (upgrading step by step from base)"
            if got != expected:
                pytest.fail(difference(what, path, expected, got), pytrace=False)
    finally:
        engine.dispose()


def test_each_downgrade_gives_back_the_schema_before_and_base_is_empty(url: str) -> None:
    """Down from head one revision at a time: each step leaves the snapshot of the revision it goes back
    to, and at base nothing of gpuseat is left (only Alembic's empty ``alembic_version``)."""
    engine = make_engine(url)
    config = alembic_config()
    dialect = engine.dialect.name
    try:
        migrate(engine, config, command.upgrade, "head")
        steps = revisions(config)[::-1]
        for revision, target in itertools.pairwise(steps):
            migrate(engine, config, command.downgrade, target)
            path = snapshot_path(dialect, target)
            expected, got = read_snapshot(path), dump(engine)
            what = f"downgrading {revision} to {target} on {dialect} no longer gives back {target}'s schema (a downgrade must undo exactly what its upgrade made)"
            if got != expected:
                pytest.fail(difference(what, path, expected, got), pytrace=False)
        migrate(engine, config, command.downgrade, "base")
        left = dump(engine)
        assert left == [], f"downgrading to base on {dialect} left:\n" + "\n".join(left)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar_one() == 0
    finally:
        engine.dispose()
