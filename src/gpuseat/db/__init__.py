"""The course database: one store for the whole project (SQLite in WAL mode, or any SQLAlchemy URL).

Where it lives, first match wins: ``--db URL``, env ``GPUSEAT_DB_URL``, else
``<data dir>/gpuseat.db`` where the data dir is env ``GPUSEAT_DATA_DIR`` or the user data
folder (platformdirs). PostgreSQL works with ``postgresql+psycopg://user@host/db``. The schema is
created and upgraded by the Alembic migrations shipped in ``gpuseat/db/migrations``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuseat.paths import data_dir

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

DB_FILE = "gpuseat.db"

__all__ = ["DB_FILE", "data_dir", "make_engine", "resolve_url", "upgrade"]


def resolve_url(url: str | None = None) -> str:
    """The database URL to use: the argument, ``GPUSEAT_DB_URL``, or SQLite in :func:`data_dir`."""
    if url:
        return url
    env = os.environ.get("GPUSEAT_DB_URL")
    if env:
        return env
    return f"sqlite:///{data_dir() / DB_FILE}"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # readers (top, usage, the portal) never block the monitor
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
    # SQLAlchemy, not the driver, starts transactions (see _sqlite_begin): DDL becomes transactional
    # and a writer can take the write lock up front with BEGIN IMMEDIATE.
    dbapi_conn.isolation_level = None


def _sqlite_begin(conn: Any) -> None:
    mode = conn.get_execution_options().get(BEGIN_OPTION, "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {'IMMEDIATE' if mode == 'IMMEDIATE' else 'DEFERRED'}")


BEGIN_OPTION = "gpuseat_sqlite_begin"


def immediate(engine: Engine) -> Engine:
    """The same engine, but on SQLite every transaction starts with ``BEGIN IMMEDIATE``.

    A read-then-write transaction (claim a seat, migrate) then holds SQLite's one write lock from its
    first read, so two writers queue instead of failing with "database is locked" half-way.
    PostgreSQL ignores the option (it locks rows with ``FOR UPDATE``).
    """
    return engine.execution_options(**{BEGIN_OPTION: "IMMEDIATE"})


SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_sqlite_file(path: Path, *, create: bool) -> None:
    """A SQLite path must be a SQLite file, or absent when the command may create the database."""
    from gpuseat.errors import InputError

    where = f"--db {path}"
    if not path.exists():
        if not create:
            raise InputError(
                "no gpuseat database here",
                where=where,
                fix="check the path, or create it with a command that writes (gpuseat course create, gpuseat monitor)",
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        return
    if not path.is_file():
        raise InputError("not a regular file", where=where, fix="give the path of a SQLite database file")
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=where, fix="check permissions") from None
    if head and head != SQLITE_MAGIC:
        raise InputError("not a SQLite database file", where=where, fix="give gpuseat's database file (gpuseat.db)")


def make_engine(url: str | None = None, *, create: bool = True) -> Engine:
    """An engine for the course database.

    ``create=False`` (read-only commands) refuses a SQLite file that does not exist yet, so a mistyped
    ``--db`` path is an error instead of a new empty database.
    """
    from sqlalchemy import create_engine, event
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from gpuseat.errors import InputError

    resolved = resolve_url(url)
    try:
        parsed = make_url(resolved)
    except ArgumentError:
        raise InputError(
            f"not a database URL: {resolved!r}",
            where="db_url",
            fix="use sqlite:///path/gpuseat.db or postgresql+psycopg://user@host/dbname",
        ) from None
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            _check_sqlite_file(Path(parsed.database).expanduser(), create=create)
        engine = create_engine(parsed, connect_args={"timeout": 60})  # writers queue up to 60 s
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    try:
        return create_engine(parsed, pool_pre_ping=True)
    except Exception as exc:  # missing driver module, bad dialect name
        raise InputError(
            f"cannot use database URL {parsed.render_as_string(hide_password=True)}: {exc}",
            where="db_url",
            fix="for PostgreSQL use postgresql+psycopg://…",
        ) from None


def _foreign_tables(conn: Any) -> list[str]:
    """Tables that say this database belongs to another application (empty when it is gpuseat's)."""
    from sqlalchemy import inspect

    tables = set(inspect(conn).get_table_names())
    if not tables or "alembic_version" in tables:
        return []
    return sorted(tables)


def _lock_for_migration(conn: Any) -> None:
    """Serialise schema creation between processes that open a new database at the same moment."""
    from sqlalchemy import text

    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(7368016744)"))  # gpuseat's lock id, released at commit
    # SQLite: the transaction began with BEGIN IMMEDIATE (see immediate()): it holds the write lock


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` with the packaged Alembic migrations, in one transaction.

    Refuses a database that holds another application's tables; safe when several processes open a new
    database at once (the migration runs under a write lock, the others then find it done). On SQLite
    foreign keys are off while tables are rebuilt (a rebuild drops the old table, which would otherwise
    cascade to samples and assignments) and checked before commit.
    """
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from sqlalchemy.exc import DatabaseError, OperationalError

    from gpuseat.errors import InputError, StoreError

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    heads = set(ScriptDirectory.from_config(config).get_heads())
    where = engine.url.render_as_string(hide_password=True)
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("PRAGMA schema_version")  # fails early on a file that is not SQLite
            current = set(MigrationContext.configure(conn).get_current_heads())
            if revision == "head" and current == heads:
                return  # nothing to do: skip the lock
            foreign = _foreign_tables(conn)
        if foreign:
            raise InputError(
                f"not a gpuseat database: it holds other tables ({', '.join(foreign[:5])})",
                where=where,
                fix="give gpuseat its own database file or PostgreSQL database",
            )
        with immediate(engine).connect() as conn:  # SQLite: the transaction begins IMMEDIATE
            sqlite = conn.dialect.name == "sqlite"
            if sqlite:
                _raw_pragma(conn, "PRAGMA foreign_keys=OFF")  # only possible outside a transaction
            try:
                with conn.begin():
                    _lock_for_migration(conn)
                    config.attributes["connection"] = conn
                    command.upgrade(config, revision)
                    if sqlite and conn.exec_driver_sql("PRAGMA foreign_key_check").first() is not None:
                        raise StoreError(
                            "the schema upgrade would leave rows pointing at missing rows; nothing was changed",
                            where=where,
                            fix="report this with a copy of the database",
                        )
            finally:
                if sqlite:
                    _raw_pragma(conn, "PRAGMA foreign_keys=ON")
    except OperationalError as exc:
        raise StoreError(
            f"cannot open the course database: {str(exc.orig).strip().splitlines()[0]}",
            where=where,
            fix="check the --db URL, that the server runs and accepts you, and that the file is writable",
        ) from None
    except DatabaseError as exc:
        raise InputError(
            f"not a usable database: {str(exc.orig).strip().splitlines()[0]}",
            where=where,
            fix="give gpuseat's database file (gpuseat.db) or a PostgreSQL URL",
        ) from None


def _raw_pragma(conn: Any, statement: str) -> None:
    cur = conn.connection.cursor()  # the DBAPI connection: no SQLAlchemy transaction is begun
    cur.execute(statement)
    cur.close()
