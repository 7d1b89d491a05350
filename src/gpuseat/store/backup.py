"""Whole-store backups: ``gpuseat db backup --to FILE`` and ``gpuseat db restore FILE``.

* SQLite: the online backup API (``sqlite3.Connection.backup`` in one step): a consistent copy of
  the database as of one moment, taken while the portal, the monitor and claims keep writing (WAL:
  the copy reads a snapshot, writers are not stopped). The copy is written beside the target and
  renamed, then checked (``PRAGMA integrity_check``).
* PostgreSQL: ``pg_dump --format=custom`` (restored with ``pg_restore``). The connection details go
  to the tools through ``PG*`` environment variables, never on the command line; a per-schema URL
  (``options=-csearch_path=…``) dumps that schema only.

Restore refuses a store that holds courses unless ``force``; a SQLite backup restores into SQLite and a
PostgreSQL dump into PostgreSQL (to move a course between the two, use ``course export``/``import``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from sqlalchemy.engine import URL, make_url

from gpuseat.db import SQLITE_MAGIC, resolve_url
from gpuseat.errors import EngineError, InputError

__all__ = ["backup", "restore"]

PG_MAGIC = b"PGDMP"


def _sqlite_path(url: URL) -> Path:
    if not url.database or url.database == ":memory:":
        raise InputError("an in-memory database cannot be backed up", where="--db", fix="give a database file")
    return Path(url.database).expanduser()


def _pg_env(url: URL) -> tuple[dict[str, str], str | None]:
    """libpq environment for ``url`` and the schema named in its search_path option (if any)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    q = dict(url.query)
    host = q.get("host") or url.host
    for name, value in (
        ("PGHOST", host),
        ("PGPORT", str(url.port) if url.port else None),
        ("PGUSER", url.username),
        ("PGPASSWORD", url.password),
        ("PGDATABASE", url.database),
    ):
        if value:
            env[name] = str(value)
    options = q.get("options")
    schema = None
    if isinstance(options, str):
        env["PGOPTIONS"] = options
        m = re.search(r"search_path\s*=\s*([A-Za-z_][A-Za-z0-9_]*)", unquote(options))
        schema = m.group(1) if m else None
    return env, schema


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise EngineError(
            f"{name} is not installed",
            where="gpuseat db",
            fix="install the PostgreSQL client tools (postgresql-client)",
        )
    return found


def _run(cmd: list[str], env: dict[str, str], what: str) -> None:
    from gpuseat.engines.runner import default_runner

    done = default_runner().run(cmd, env=env, timeout=3600, check=False, where=cmd[0])
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[0]
        raise EngineError(
            f"{what} failed: {first}", where=cmd[0], fix="check the database URL and that the server runs"
        )


def _backup_error(exc: sqlite3.Error, phase: str, src_path: Path, to: Path) -> Exception:
    """One clear error for a failed SQLite copy (``phase``: ``read`` the store, ``write`` the target, or
    ``copy``): the store is not an intact database, the target's disk is full, the target cannot be
    written. Exit code 2 for each; the store is untouched (it is only read)."""
    from gpuseat.errors import disk_full

    code = getattr(exc, "sqlite_errorname", "")
    text = str(exc).lower()
    if phase == "read" or code in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or "not a database" in text:
        return InputError(
            f"cannot read the store as a SQLite database ({exc})",
            where=f"--db {src_path}",
            fix="give gpuseat's database file (GPUSEAT_DB_URL / --db), or restore it from a backup",
        )
    if code == "SQLITE_FULL" or "disk is full" in text or _full(to.parent):
        return disk_full(to, where="--to")
    if phase == "write" or code in ("SQLITE_CANTOPEN", "SQLITE_READONLY"):
        return InputError(
            f"cannot write the backup here ({exc})",
            where=f"--to {to}",
            fix="give a file in a folder this user can write",
        )
    return EngineError(f"the backup failed: {exc}", where=f"--to {to}", fix="run it again; the store is untouched")


def _full(folder: Path) -> bool:
    """Whether the file system of ``folder`` has no space left for this user."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024


def _remove(tmp: Path) -> None:
    """The temporary copy and whatever SQLite made beside it (journal, WAL, shared memory)."""
    for path in (tmp, *(tmp.with_name(tmp.name + suffix) for suffix in ("-journal", "-wal", "-shm"))):
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def _sqlite_copy(src_path: Path, tmp: Path, to: Path) -> None:
    """The online backup of ``src_path`` into ``tmp``, checked; a clear error (and nothing left) if not."""
    from gpuseat.db import _check_sqlite_file

    _check_sqlite_file(src_path, create=False)  # absent, not a regular file, not SQLite: one message
    src = dst = None
    phase = "read"
    try:
        src = sqlite3.connect(f"file:{src_path}?mode=ro", uri=True, timeout=60)
        tables = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "alembic_version" not in tables:
            raise InputError(
                "not a gpuseat database (a SQLite file without gpuseat's tables)",
                where=f"--db {src_path}",
                fix="give gpuseat's database file (GPUSEAT_DB_URL / --db)",
            )
        phase = "write"
        dst = sqlite3.connect(tmp)
        dst.execute("PRAGMA journal_mode=MEMORY")  # no journal file beside the target
        phase = "copy"
        src.backup(dst)  # one step: a snapshot of one moment, writers keep going (WAL)
        ok = dst.execute("PRAGMA integrity_check").fetchone()
    except sqlite3.Error as exc:
        raise _backup_error(exc, phase, src_path, to) from None
    finally:
        for conn in (dst, src):
            if conn is not None:
                conn.close()
    if ok is None or ok[0] != "ok":
        raise EngineError("the copy failed its integrity check", where=str(to), fix="run the backup again")


def backup(db: str | None, to: Path, *, force: bool = False) -> dict[str, Any]:
    """Back up the store at ``db`` (None: the default one) to ``to``; returns what was written.

    Whole or not at all: a bad store, a target that cannot be written or a full disk is one clear
    error (exit code 2), with no partial or temporary file left beside the target.
    """
    from gpuseat.errors import disk_full
    from gpuseat.store.export import check_archive_target

    url = make_url(resolve_url(db))
    check_archive_target(to, force=force)
    tmp = to.with_name(f".{to.name}.gpuseat-{os.getpid()}.tmp")
    _remove(tmp)
    try:
        if url.get_backend_name() == "sqlite":
            _sqlite_copy(_sqlite_path(url), tmp, to)
            kind = "sqlite"
        elif url.get_backend_name() == "postgresql":
            env, schema = _pg_env(url)
            cmd = [_tool("pg_dump"), "--format=custom", "--no-owner", f"--file={tmp}"]
            if schema:
                cmd.append(f"--schema={schema}")
            try:
                _run(cmd, env, "pg_dump")
            except EngineError as exc:
                if "no space left" in exc.what.lower() or _full(to.parent):
                    raise disk_full(to, where="--to") from None
                if "could not open output file" in exc.what.lower():
                    raise InputError(
                        exc.what, where=f"--to {to}", fix="give a file in a folder this user can write"
                    ) from None
                raise
            kind = "postgresql"
        else:
            raise InputError(
                f"cannot back up a {url.get_backend_name()} database", where="--db", fix="SQLite or PostgreSQL"
            )
        try:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, to)
        except OSError as exc:
            from gpuseat.files import write_error

            raise write_error(exc, f"--to {to}") from None
    finally:
        _remove(tmp)
    return {"database": kind, "path": to, "bytes": to.stat().st_size}


def _has_courses(db: str) -> bool:
    """Whether the store at ``db`` holds any course (an absent or empty database holds none)."""
    from sqlalchemy import inspect, text

    from gpuseat.db import make_engine

    engine = make_engine(db, create=True)
    try:
        if "courses" not in inspect(engine).get_table_names():
            return False
        with engine.connect() as conn:
            return bool(conn.execute(text("SELECT count(*) FROM courses")).scalar())
    finally:
        engine.dispose()


def restore(db: str | None, source: Path, *, force: bool = False) -> dict[str, Any]:
    """Restore a backup made by :func:`backup` into the store at ``db``; refuses a store with courses
    unless ``force``. The schema is then brought to this gpuseat's version. What keeps people out in the
    replaced store stays (:mod:`gpuseat.store.restore_keep`): ``kept`` in the result, None when the target
    was no gpuseat store yet."""
    import stat

    from gpuseat.store.restore_keep import Kept, apply_kept, read_kept

    url_text = resolve_url(db)
    url = make_url(url_text)
    try:
        if not stat.S_ISREG(os.stat(source).st_mode):
            raise InputError("not a regular file", where=str(source), fix="give a file made by gpuseat db backup")
        with open(source, "rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(source), fix="check the path") from None
    kind = "sqlite" if head.startswith(SQLITE_MAGIC) else "postgresql" if head.startswith(PG_MAGIC) else None
    if kind is None:
        raise InputError(
            "not a gpuseat backup (neither SQLite nor a pg_dump archive)",
            where=str(source),
            fix="give a file made by gpuseat db backup",
        )
    if kind != url.get_backend_name():
        raise InputError(
            f"a {kind} backup cannot be restored into a {url.get_backend_name()} database",
            where=str(source),
            fix="restore into the same kind of database; to move courses between them use gpuseat course export/import",
        )

    replaced: list[Kept | None] = [None]

    def refuse_replacing() -> None:
        # after the backup is known good: a bad file is named as such, not first met with "add --force"
        if _has_courses(url_text) and not force:
            raise InputError(
                "the target store holds courses; restoring would replace them",
                where=f"--db {url.render_as_string(hide_password=True)}",
                fix="restore into a new database, or add --force to replace its contents",
            )
        replaced[0] = read_kept(url_text)  # revoked links, newer passwords: read before they are replaced

    if kind == "sqlite":
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        try:
            ok = src.execute("PRAGMA integrity_check").fetchone()
            tables = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if ok is None or ok[0] != "ok" or "alembic_version" not in tables:
                raise InputError("not an intact gpuseat backup", where=str(source), fix="use another backup file")
            refuse_replacing()
            dst = sqlite3.connect(_sqlite_path(url), timeout=60)
            try:
                src.backup(dst)  # page by page into the live file, under its write lock
            finally:
                dst.close()
        except sqlite3.DatabaseError as exc:
            raise InputError(
                f"not an intact gpuseat backup ({exc})", where=str(source), fix="use another backup file"
            ) from None
        finally:
            src.close()
    else:
        refuse_replacing()
        env, _schema = _pg_env(url)
        cmd = [_tool("pg_restore"), "--no-owner", "--exit-on-error", f"--dbname={env.get('PGDATABASE', '')}"]
        if force:
            cmd += ["--clean", "--if-exists"]
        _run([*cmd, str(source)], env, "pg_restore")
    from sqlalchemy import text

    from gpuseat.db import make_engine, upgrade
    from gpuseat.store.facade import Store

    engine = make_engine(url_text)
    try:
        upgrade(engine)  # a backup from an older gpuseat is brought to this schema
        with engine.connect() as conn:
            courses = list(conn.execute(text("SELECT key FROM courses ORDER BY key")).scalars())
        kept = None
        if replaced[0] is not None:
            with Store(engine) as store:  # one write transaction, through the store's writer
                kept = apply_kept(store, replaced[0])
    finally:
        engine.dispose()
    return {"database": kind, "path": source, "courses": courses, "kept": kept}
