"""Opening the course store: refuse what is not gpuseat's, upgrade an older schema, never create on read."""

from __future__ import annotations

import ast
import threading
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from gpuseat.db import make_engine, upgrade
from gpuseat.errors import InputError, StoreError
from gpuseat.pysource import parse_python
from gpuseat.store.facade import Store

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from gpuseat.store.monitor import MonitorStore


def open_store(url: str | None = None, *, create: bool = False) -> Store:
    """The course store at ``url`` (``None``: ``GPUSEAT_DB_URL`` or SQLite in the data dir).

    ``create=False`` (commands that only read) refuses a missing database instead of making an empty
    one; a database with other applications' tables, or from a newer gpuseat, is refused either way.
    An older gpuseat schema is upgraded in place (its rows are kept). Opening writes nothing when the
    schema is current, so a read never waits for another process's write lock (see :func:`ensure_schema`).
    """
    engine = make_engine(url, create=create)
    ensure_schema(engine, create=create, wait=create)
    return Store(engine)


def open_monitor(
    url: str | None = None, *, create: bool = True, course: str | None = None, raw_keep_s: int | None = None
) -> MonitorStore:
    """The monitor's side of the store at ``url`` (``create``: made when absent), of one course or all.

    It owns the store it opens: its :meth:`MonitorStore.close` closes that store (the monitor loop's way).
    ``raw_keep_s``: seconds of raw samples kept (``None``: the monitor's ``RAW_KEEP_S``, imported here so
    that opening the store for other commands does not load the monitor).
    """
    from gpuseat.store.monitor import RAW_KEEP_S

    keep = RAW_KEEP_S if raw_keep_s is None else raw_keep_s
    return open_store(url, create=create).monitor.of_course(course, raw_keep_s=keep)


def ensure_schema(engine: Engine, *, create: bool, wait: bool = True) -> None:
    """Check (and when older, upgrade) the schema of the database behind ``engine``; dispose it on error.

    At the current revision this is one read (no Alembic import, no write, no lock). ``create``: a
    database without gpuseat's tables gets them (else it is refused). ``wait=False`` (a read): an
    upgrade is made only when SQLite's write lock is free at once; when another process holds it the
    read is refused at once, saying who holds it, instead of waiting for the lock.
    """
    shown = engine.url.render_as_string(hide_password=True)
    try:
        revision = None
        if "alembic_version" in inspect(engine).get_table_names():
            with engine.connect() as conn:
                revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except OperationalError as exc:
        engine.dispose()
        raise StoreError(
            f"cannot open the course database: {str(exc.orig).strip().splitlines()[0]}",
            where=shown,
            fix="check the --db URL, that the server runs and accepts you, and that the file is writable",
        ) from None
    except SQLAlchemyError:
        engine.dispose()
        raise InputError(
            "not a usable database", where=shown, fix="give gpuseat's database file (gpuseat.db) or a PostgreSQL URL"
        ) from None
    if revision is None and not create:
        engine.dispose()
        raise InputError(
            "no gpuseat tables in this database yet",
            where=shown,
            fix="create a course first (gpuseat course create COURSE.toml)",
        )
    known, heads = _known_revisions()
    if revision is not None and revision not in known:
        engine.dispose()
        raise StoreError(f"made by a newer gpuseat (schema revision {revision})", where=shown, fix="upgrade gpuseat")
    if revision is not None and {revision} == heads:
        return
    try:
        if not wait:
            _refuse_if_locked(engine, revision, heads)
        upgrade(engine)  # refuses other applications' tables
    except Exception:
        engine.dispose()
        raise


def _refuse_if_locked(engine: Engine, revision: str | None, heads: frozenset[str]) -> None:
    """SQLite: a read that must upgrade the schema first does so only when the write lock is free now."""
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:":
        return
    import sqlite3

    from gpuseat.db.holders import lock_holders

    probe = sqlite3.connect(database, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc).lower() and "busy" not in str(exc).lower():
            return  # not a lock: the upgrade says what is wrong
    finally:
        probe.close()
    holders = lock_holders(Path(database))
    who = f" ({', '.join(holders)})" if holders else ""
    raise StoreError(
        f"the database's schema (revision {revision}) must be upgraded to {', '.join(sorted(heads))} before it "
        f"can be read, and another process holds the write lock{who}; nothing was changed",
        where=f"database {database}",
        fix="run this again when that command has finished (a read never waits for a writer)",
    )


_REVISIONS_READ = threading.Lock()


def _known_revisions() -> tuple[frozenset[str], frozenset[str]]:
    """(every revision, the heads) of the packaged migrations, read once per process.

    One thread reads while the others wait (the JupyterHub hooks open stores from worker threads), and
    each file is parsed with :func:`gpuseat.pysource.parse_python`, which tries again when another thread
    using :mod:`ast` at the same moment (a traceback placing its carets) trips CPython 3.11's shared AST
    recursion counter: "AST constructor recursion depth mismatch" (python/cpython#106905).
    """
    with _REVISIONS_READ:
        return _read_revisions()


@cache
def _read_revisions() -> tuple[frozenset[str], frozenset[str]]:
    """(every revision, the heads) of the packaged migrations, read from their module-level assignments.

    Alembic's own ``ScriptDirectory`` gives the same answer but importing it costs about 0.15 s of
    every CLI command on a loaded machine, and a database already at the head needs none of it; so
    the ``revision`` / ``down_revision`` assignments are read with :mod:`ast` (tuples of a merge
    revision included). ``tests/store/test_migration.py`` checks the answer against Alembic's.
    """
    found: dict[str, tuple[str, ...]] = {}
    for path in (Path(__file__).parents[1] / "db" / "migrations" / "versions").glob("[0-9]*.py"):
        values: dict[str, object] = {}
        # parse_python: tried again past python/cpython#106905 (another thread using ast at once)
        for node in parse_python(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name, value = node.targets[0].id, node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                name, value = node.target.id, node.value
            else:
                continue
            if name in ("revision", "down_revision"):
                try:
                    values[name] = ast.literal_eval(value)
                except ValueError:
                    continue
        rev, down = values.get("revision"), values.get("down_revision")
        if isinstance(rev, str):
            parents = (down,) if isinstance(down, str) else down if isinstance(down, tuple) else ()
            found[rev] = tuple(d for d in parents if isinstance(d, str))
    downs = {d for ds in found.values() for d in ds}
    return frozenset(found), frozenset(found) - downs
