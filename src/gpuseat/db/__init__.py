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

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

DB_FILE = "gpuseat.db"


def data_dir() -> Path:
    """The folder for gpuseat's own files (env ``GPUSEAT_DATA_DIR`` overrides)."""
    override = os.environ.get("GPUSEAT_DATA_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_data_dir("gpuseat", appauthor=False))


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


def make_engine(url: str | None = None) -> Engine:
    """An engine for the course database; creates the SQLite folder when needed."""
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
            where="--db / GPUSEAT_DB_URL",
            fix="use sqlite:///path/gpuseat.db or postgresql+psycopg://user@host/dbname",
        ) from None
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    try:
        return create_engine(parsed, pool_pre_ping=True)
    except Exception as exc:  # missing driver module, bad dialect name
        raise InputError(
            f"cannot use database URL {parsed.render_as_string(hide_password=True)}: {exc}",
            where="--db / GPUSEAT_DB_URL",
            fix="for PostgreSQL use postgresql+psycopg://…",
        ) from None


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` with the packaged Alembic migrations."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
