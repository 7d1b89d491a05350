"""The course database: one store for the whole project (SQLite in WAL mode, or any SQLAlchemy URL).

Where it lives, first match wins: ``--db URL``, env ``GPUSEAT_DB_URL``, else
``<data dir>/gpuseat.db`` where the data dir is env ``GPUSEAT_DATA_DIR`` or the user data
folder (platformdirs). PostgreSQL works with ``postgresql+psycopg://user@host/db``. The schema is
created and upgraded by the Alembic migrations shipped in ``gpuseat/db/migrations``.
"""

from __future__ import annotations

import os
import re
from functools import cache
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
    if os.environ.get("SUDO_USER"):  # sudo gpuseat …: the files stay the organizer's, not root's
        from gpuseat.paths import hand_back

        for _seq, _name, file in cur.execute("PRAGMA database_list").fetchall():
            if file:
                for folder in Path(file).parents:
                    hand_back(folder)  # the folders root made (hand_back stops at the user's home)
                for suffix in ("", "-wal", "-shm", ".lock", ".lock.box"):
                    hand_back(Path(file + suffix))
    cur.close()
    # SQLAlchemy, not the driver, starts transactions (see _sqlite_begin): DDL becomes transactional
    # and a writer can take the write lock up front with BEGIN IMMEDIATE.
    dbapi_conn.isolation_level = None


_EXCLUSIVE = "gpuseat_exclusive"


def _sqlite_connect(dialect: Any, record: Any, cargs: Any, cparams: Any) -> Any:
    """A SQLite connection; on a full disk, one that can still read.

    In WAL mode SQLite sizes a shared-memory file beside the database before the first read, and on a
    full disk that fails (``SQLITE_IOERR_SHMSIZE``): no command could even read. Such a connection is
    made again in exclusive locking mode, which keeps the WAL index in its own memory; as it locks other
    processes out while open, it is closed when it goes back to the pool (:func:`_drop_exclusive`).
    A write on it still fails (no space), with the full-disk message.
    """
    conn = dialect.connect(*cargs, **cparams)
    try:
        conn.execute("PRAGMA journal_mode=WAL").close()
    except Exception as exc:
        conn.close()
        if getattr(exc, "sqlite_errorname", "") != "SQLITE_IOERR_SHMSIZE":
            raise
        conn = dialect.connect(*cargs, **cparams)
        conn.execute("PRAGMA locking_mode=EXCLUSIVE").close()
        record.info[_EXCLUSIVE] = True
    return conn


def _drop_exclusive(_dbapi_conn: Any, record: Any) -> None:
    """A connection opened in exclusive locking mode (a full disk) is closed when it is given back."""
    if record is not None and record.info.pop(_EXCLUSIVE, False):
        record.invalidate()


def _sqlite_begin(conn: Any) -> None:
    mode = conn.get_execution_options().get(BEGIN_OPTION, "DEFERRED")
    if mode != "IMMEDIATE":
        conn.exec_driver_sql("BEGIN DEFERRED")  # a read: never waits for a writer (WAL)
        return
    from gpuseat.db.waiting import waiting

    with waiting(conn.engine.url.database):  # after 2 s: "waiting for another writer (pid …)…"
        conn.exec_driver_sql("BEGIN IMMEDIATE")


BEGIN_OPTION = "gpuseat_sqlite_begin"


def immediate(engine: Engine) -> Engine:
    """The same engine, but on SQLite every transaction starts with ``BEGIN IMMEDIATE``.

    A read-then-write transaction (claim a seat, migrate) then holds SQLite's one write lock from its
    first read, so two writers queue instead of failing with "database is locked" half-way.
    PostgreSQL ignores the option (it locks rows with ``FOR UPDATE``).
    """
    return engine.execution_options(**{BEGIN_OPTION: "IMMEDIATE"})


SQLITE_MAGIC = b"SQLite format 3\x00"


#: How long a writer waits for another writer's lock before it gives up (seconds); the same for every
#: writing command, the portal and the monitor. ``GPUSEAT_DB_BUSY_TIMEOUT`` changes it.
BUSY_TIMEOUT_S = 60.0


def busy_timeout() -> float:
    """The writers' busy timeout in seconds (``GPUSEAT_DB_BUSY_TIMEOUT`` or :data:`BUSY_TIMEOUT_S`). A value
    that is not a number of seconds from 0 to 86400 is an input error, read when the store is opened (it fell
    back to the default without a word: a typo'd ``300s`` left writers at the default)."""
    return _seconds("GPUSEAT_DB_BUSY_TIMEOUT", BUSY_TIMEOUT_S)


#: How long a portal request waits for another writer's lock before its page says "busy, try again" (503
#: with ``Retry-After``); at most the busy timeout. ``GPUSEAT_WEB_BUSY_TIMEOUT`` changes it. A person at a
#: browser gives up after a few seconds, and every request waiting a full busy timeout keeps one of the
#: server's threads: a registration rush behind a held lock would use them all up.
WEB_BUSY_TIMEOUT_S = 5.0


def web_busy_timeout() -> float:
    """How long a portal request's write waits for a lock: ``GPUSEAT_WEB_BUSY_TIMEOUT`` or
    :data:`WEB_BUSY_TIMEOUT_S`, never more than :func:`busy_timeout`; checked as that one is."""
    return min(_seconds("GPUSEAT_WEB_BUSY_TIMEOUT", WEB_BUSY_TIMEOUT_S), busy_timeout())


def _seconds(name: str, default: float) -> float:
    """The seconds in environment variable ``name`` (above 0, at most 86400), else ``default``."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    from gpuseat.core.numbers import plain_number

    try:
        value = plain_number(raw, whole=False)  # the digits 0-9, as every number gpuseat reads (not ١٢ or 1e3)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 86400:  # nan too
        from gpuseat.errors import InputError

        raise InputError(
            f"{name}={raw[:40]!r} is not a number of seconds",
            where=f"environment variable {name}",
            fix=f"set it to seconds above 0 and at most 86400 (such as {default:g}), or unset it for {default:g} s",
        )
    return value


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

    resolved = database_url(resolve_url(url))
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
        engine = create_engine(parsed, connect_args={"timeout": busy_timeout()})  # writers queue, then fail clearly
        event.listen(engine, "do_connect", _sqlite_connect)
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "checkin", _drop_exclusive)
        event.listen(engine, "begin", _sqlite_begin)
        event.listen(engine, "handle_error", _sqlite_error)
        return engine
    try:
        return create_engine(parsed, pool_pre_ping=True)
    except Exception as exc:  # missing driver module, bad dialect name
        raise InputError(
            f"cannot use database URL {parsed.render_as_string(hide_password=True)}: {exc}",
            where="db_url",
            fix="for PostgreSQL use postgresql+psycopg://…",
        ) from None


def sqlite_error(message: str, database: str | None, waited_s: float | None = None) -> Exception | None:
    """One clear :class:`~gpuseat.errors.StoreError` for SQLite's own failures (None: not one of them).

    A held write lock (after ``waited_s``, default the busy timeout, naming who has the file open), a full disk, a
    read-only file or folder: each says what happened to which file and what to do; nothing stored
    is lost (the transaction was rolled back).
    """
    from gpuseat.db.holders import lock_holders
    from gpuseat.errors import StoreBusy, StoreError

    where = f"database {database}" if database else "database"
    text_ = message.lower()
    if "database is locked" in text_ or "database table is locked" in text_:
        holders = lock_holders(Path(database)) if database else []
        who = f"; open in {', '.join(holders)}" if holders else ""
        waited = busy_timeout() if waited_s is None else waited_s
        return StoreBusy(
            f"another writer held the database for more than {waited:g} s{who}",
            where=where,
            fix="let that command finish (or stop it) and run this again; nothing was changed",
        )
    if "disk is full" in text_ or ("disk i/o error" in text_ and _no_space(database)):
        from gpuseat.errors import disk_full

        return disk_full(database or "the database")  # exit 2: the transaction was rolled back
    if "disk i/o error" in text_:
        return StoreError(
            "the disk failed (an I/O error): nothing was changed",
            where=where,
            fix="check the disk (dmesg) and run the command again; stored data is intact",
        )
    if "readonly database" in text_ or "read-only" in text_ or _read_only(database):
        return StoreError(
            "the database file (or its folder) is read-only",
            where=where,
            fix="make the file and its folder writable for this user, or use --db with a writable copy",
        )
    if "unable to open database file" in text_:
        return StoreError(
            "cannot open the database file", where=where, fix="check the path, its folder and the permissions"
        )
    return None


def pg_lock_error(engine: Engine | None, seconds: float) -> Exception:
    """The one :class:`StoreBusy` for PostgreSQL's lock timeout (``lock_not_available``) after ``seconds``,
    naming the transactions open that long; the store's statements (:mod:`gpuseat.store.db`) and the claims'
    own connections raise it."""
    from gpuseat.errors import StoreBusy

    holders = _pg_holders(engine, seconds) if engine is not None else []
    who = f"; open for longer: {', '.join(holders)}" if holders else ""
    url = engine.url.render_as_string(hide_password=True) if engine is not None else "PostgreSQL"
    return StoreBusy(
        f"another writer held a lock this write needs for more than {seconds:g} s{who}",
        where=f"database {url}",
        fix="let that transaction finish (or end it: SELECT pg_terminate_backend(PID)) and run this again; "
        "nothing was changed",
    )


def _pg_holders(engine: Engine, seconds: float) -> list[str]:
    """The other sessions of this database in a transaction older than ``seconds`` (one of them holds the
    lock): ``backend pid N (application, state: query)``; empty where they cannot be read."""
    from sqlalchemy import text

    query = text(
        "SELECT pid, application_name, state, left(query, 60) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle' "
        "AND xact_start <= now() - make_interval(secs => :s) ORDER BY xact_start LIMIT 5"
    )
    try:
        with engine.connect() as conn:
            rows = conn.execute(query, {"s": seconds}).all()
    except Exception:  # seeing who holds it is a courtesy: never a second error
        return []
    return [f"backend pid {pid} ({app or '?'}, {state}: {' '.join(str(q).split())})" for pid, app, state, q in rows]


def _no_space(database: str | None) -> bool:
    """True when the file system of the database has (almost) no space left for this user."""
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(database or ".")))
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024


def _read_only(database: str | None) -> bool:
    """True when the database file exists but its file system, folder or file cannot be written."""
    if not database or not os.path.exists(database):
        return False
    folder = os.path.dirname(os.path.abspath(database))
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return True
    except OSError:
        return False
    return not os.access(folder, os.W_OK) or not os.access(database, os.W_OK)


def _sqlite_error(context: Any) -> Exception | None:
    orig = context.original_exception
    if orig is None or type(orig).__module__ not in ("sqlite3", "_sqlite3"):
        return None
    database = context.engine.url.database if context.engine is not None else None
    return sqlite_error(str(orig), database)


#: the port as typed in a database URL, found as SQLAlchemy's own pattern finds it (which reads it with int())
_URL_PORT = re.compile(r"[\w+]+://(?:[^:/]*(?::[^@]*)?@)?(?:\[[^/?]+\]|[^/:?]+)?:(?P<port>[^/?]*)")


def database_url(value: str, *, where: str = "db_url") -> str:
    """``value`` when SQLAlchemy can read it as a database URL with a usable host; else an input error."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from gpuseat.errors import InputError
    from gpuseat.safe_text import has_control

    fix = "use sqlite:///path/gpuseat.db or postgresql+psycopg://user@host/dbname"
    if has_control(value) or "\n" in value:
        raise InputError("the database URL holds control characters", where=where, fix=fix)
    try:
        parsed = make_url(value)
        host = parsed.host
        if parsed.port is not None and not 0 < parsed.port < 65536:
            raise ValueError(f"port {parsed.port} is out of range")
        typed = _URL_PORT.match(value) if parsed.port is not None else None
        if typed and not typed["port"].isascii():  # SQLAlchemy's int() read postgresql://h:١٢/db as port 12
            raise ValueError(f"port {typed['port'][:20]!r} is not in the digits 0-9")
    except (ArgumentError, ValueError, TypeError) as exc:
        raise InputError(f"not a database URL: {exc}", where=where, fix=fix) from None
    if host and (host.startswith("[") != host.endswith("]") or "[" in host.strip("[]") or "]" in host.strip("[]")):
        raise InputError(f"malformed host {host!r} (unbalanced brackets)", where=where, fix=fix)
    if host and parsed.get_backend_name() == "sqlite":  # sqlite://gpuseat.db: SQLAlchemy refuses it on first use
        raise InputError(
            f"a SQLite URL names a file, not a host ({host!r})",
            where=where,
            fix="write sqlite:///relative/path.db or sqlite:////absolute/path.db (three or four slashes)",
        )
    return value


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


def _alembic_config() -> Any:
    """A new Alembic ``Config`` for the packaged migrations (no alembic.ini: the connection is handed over)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    return config


@cache
def _heads() -> frozenset[str]:
    """The newest revisions of the packaged migrations: Alembic loads every revision file to say, so once a
    process (they are part of the installed package and do not change under it)."""
    from alembic.script import ScriptDirectory

    return frozenset(ScriptDirectory.from_config(_alembic_config()).get_heads())


def upgrade(engine: Engine, revision: str = "head", *, walk: bool = False) -> None:
    """Bring the schema to ``revision`` with the packaged Alembic migrations, in one transaction.

    A new SQLite database (no tables) gets the newest schema from the file of :mod:`gpuseat.db.fresh`
    instead, unless ``walk`` (every revision, one by one: how that file is made and checked).

    Refuses a database that holds another application's tables; safe when several processes open a new
    database at once (the migration runs under a write lock, the others then find it done). On SQLite
    foreign keys are off while tables are rebuilt (a rebuild drops the old table, which would otherwise
    cascade to samples and assignments) and checked before commit.
    """
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.exc import DatabaseError, OperationalError

    from gpuseat.db.fresh import create_from_schema
    from gpuseat.errors import InputError, StoreError

    config = _alembic_config()
    heads = set(_heads())
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
                    if walk or revision != "head" or not create_from_schema(conn, heads):
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
