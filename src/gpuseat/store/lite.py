"""``gpuseat seats status`` without SQLAlchemy: the seats of a course and their last GPU activity, read
through the DB-API driver (issue 39).

Importing SQLAlchemy's ORM and the schema costs more than the whole start-up goal of this one command, so
it reads its two answers (``store.seats.seats(course)`` and ``store.activity.last_active(…)``) here
with plain SQL, the way Datasette reads SQLite: the stdlib :mod:`sqlite3` for ``sqlite:///`` URLs,
:mod:`psycopg` (imported only then) for ``postgresql+psycopg://`` URLs. It answers only when that is
safe: an existing database, read-only (SQLite opened with ``mode=ro``), at the schema revision this
code knows. Anything else (no file yet, an older or newer schema, a URL it does not read the way
SQLAlchemy would, any driver error) gives ``None``, and the caller opens the full store, which then
upgrades, refuses or explains exactly as before.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuseat.errors import GpuseatError
from gpuseat.store.views import SEAT_COLUMNS, SeatView, _stored_time, _utc

if TYPE_CHECKING:
    from gpuseat.store import CourseStore

#: the one statement per question, ``?`` for each bound value (psycopg gets ``%s``, see :func:`_rows`)
_REVISION = "SELECT version_num FROM alembic_version"
_COURSE = "SELECT key FROM courses WHERE key = ?"
_FIRST_COURSES = "SELECT key FROM courses ORDER BY key LIMIT 11"  # the store's default-course rule
_COURSE_KEYS = "SELECT key FROM courses"  # the store's "did you mean" list, in its order
_SEATS = f"""
SELECT {", ".join(f's."{c}"' for c in SEAT_COLUMNS)}, p.key, a.valid_from, a.mode
FROM seats s
JOIN courses c ON c.id = s.course_id
LEFT OUTER JOIN assignments a ON a.seat_id = s.id AND a.valid_to IS NULL
LEFT OUTER JOIN participants p ON p.id = a.participant_id
WHERE c.key = ?
ORDER BY s.key
"""
#: where a :data:`_SEATS` row's open assignment starts (its participant's key, since when, how)
_HOLDER = len(SEAT_COLUMNS)
_OF_COURSE = "seat_id IN (SELECT s.id FROM seats s JOIN courses c ON c.id = s.course_id WHERE c.key = ?)"
_ROLLED = f"SELECT seat_id, MAX(minute) FROM minute_aggregates WHERE active_samples > 0 AND {_OF_COURSE} GROUP BY 1"
_RAW = f"SELECT seat_id, MAX(ts) FROM samples WHERE active = ? AND {_OF_COURSE} GROUP BY 1"
_COURSE_FILE = "SELECT source_text, timezone FROM courses WHERE key = ?"
#: the store's clock (``store.rows.clock_sql``), seconds since the epoch: SQLite's, then PostgreSQL's
_CLOCK = ("SELECT (julianday('now') - 2440587.5) * 86400.0", "SELECT extract(epoch FROM clock_timestamp())")
#: ``store.seats.held_on_devices`` for the UUIDs of the course's seats of the engines that deliver a GPU of their
#: server (``engines``: as many marks as ``gpuseat.engines.host.others.LOCAL`` names, bound before and after the
#: course key): every held seat of those engines on one of them in a course that is not archived (this course's
#: too), oldest first
_HELD = """
SELECT c.key, s.key, s.device_uuid, p.key, p.unix_user, a.valid_from
FROM seats s
JOIN courses c ON c.id = s.course_id
JOIN assignments a ON a.seat_id = s.id AND a.valid_to IS NULL
JOIN participants p ON p.id = a.participant_id
WHERE c.archived_at IS NULL AND s.engine IN ({engines}) AND s.device_uuid IN (
    SELECT o.device_uuid FROM seats o JOIN courses oc ON oc.id = o.course_id
    WHERE oc.key = ? AND o.engine IN ({engines})
)
ORDER BY a.valid_from, c.key, s.key
"""
#: the names of a :data:`_HELD` row (those of ``held_on_devices``' rows that the notes read)
_HELD_NAMES = ("course", "seat", "device_uuid", "participant", "unix_user", "since")


class SeatStatus(NamedTuple):
    """What ``seats status`` shows: the course's seats by key, and when each was last in use."""

    seats: list[SeatView]
    #: seat id → Unix seconds of the last GPU activity (None: never seen in use), as ``store.activity.last_active``
    last_active: dict[int, float | None]
    #: why the course's access is closed now (the engines lock its seats), else None (:func:`access_closed`)
    closed: str | None = None
    #: held seats (of the engines that deliver a GPU of their server) on the device UUIDs of the course's seats of
    #: those engines, in every course not archived, as
    #: ``store.seats.held_on_devices`` gives them (another course's older holder keeps such a GPU)
    held: tuple[dict[str, Any], ...] = ()

    def notes(self) -> dict[str, str]:
        """Seat key → what the organizer's views say beside a held seat's state: its holder gets no access now,
        though the seat may say running or applied. Another course's older holder keeps its GPU (the host
        engine's rule, :mod:`gpuseat.engines.host.others`, by device UUID, in its words), or the course's access
        is closed (the engines lock the seats then)."""
        from gpuseat.engines.host import others

        kept = others.by_uuid(self.seats[0].course, self.held) if self.held else {}
        out = {}
        for s in self.seats:
            other = kept.get(s.key) if s.participant and s.engine in others.LOCAL else None
            if other is not None:
                out[s.key] = others.refusal(s.key, s.participant or "", other)[0]
            elif s.participant and self.closed:
                out[s.key] = f"access closed: {self.closed}"
        return out


def access_closed(text: str | None, timezone: str, now: Callable[[], datetime]) -> str | None:
    """Why a course (its file's ``text``) is closed at ``now()``, else None: the engines' rule
    (:func:`gpuseat.core.window.access_now`). A course that never closes (24/7 without sessions, or ``access =
    "24/7"``: ``Schedule.always_on``) is told from the TOML alone, without Pydantic (``seats status`` stays light)."""
    import tomllib

    try:
        raw = tomllib.loads(text or "")
    except ValueError:
        return None
    sched = raw.get("schedule")
    if not isinstance(sched, dict):
        return None
    access = sched.get("access")
    if access == "24/7" or (access is None and sched.get("hours") is None and not sched.get("session")):
        return None
    from gpuseat.core.course import Course
    from gpuseat.core.window import access_now

    try:
        return access_now(Course.model_validate(raw), timezone, now())[0]
    except ValueError:  # a file the store would not parse either: nothing to say here
        return None


def seat_status(db: str | None, course: str | None) -> SeatStatus | None:
    """The seats of ``course`` (None: the only course) and their last activity, or None: ask the full store.

    ``db`` is the ``--db`` argument (None: ``GPUSEAT_DB_URL`` or the data dir's SQLite file, as
    :func:`gpuseat.db.resolve_url`). An unknown course, or none named when the store holds none or
    several, raises the store's own error.
    """
    from gpuseat.db import resolve_url

    try:
        conn = _connect(resolve_url(db))
        if conn is None:
            return None
        try:
            return _read(conn, course)
        finally:
            conn.close()
    except GpuseatError:
        raise
    except Exception:  # a driver's error, a value the ORM would not read either: the full store says what
        return None


def full_status(store: CourseStore, course: str | None) -> SeatStatus:
    """What :func:`seat_status` reads, through the full store (where the light read gives None)."""
    seats = store.seats.seats(course)
    return SeatStatus(seats, store.activity.last_active(seat_ids=[s.id for s in seats]), *for_notes(store, seats))


def for_notes(store: CourseStore, seats: list[SeatView]) -> tuple[str | None, tuple[dict[str, Any], ...]]:
    """(:attr:`SeatStatus.closed`, :attr:`SeatStatus.held`) of a course's ``seats``, through the full store: two
    statements, the course file parsed only when its schedule can close (as the light read)."""
    from sqlalchemy import select

    from gpuseat.db.models import CourseRecord
    from gpuseat.store.rows import db_now

    if not any(s.participant for s in seats):
        return None, ()
    with store.database.read() as s:
        q = select(CourseRecord.source_text, CourseRecord.timezone).where(CourseRecord.key == seats[0].course)
        text, timezone = s.execute(q).one()
        closed = access_closed(text, timezone, lambda: db_now(s))
    from gpuseat.engines.host.others import LOCAL

    uuids = {s.device_uuid for s in seats if s.engine in LOCAL and s.device_uuid}
    return closed, tuple({k: r[k] for k in _HELD_NAMES} for r in store.seats.held_on_devices(uuids, LOCAL))


def head_revision() -> str:
    """The newest migration's revision, from the file names (``0015_seat_requests.py`` → ``0015``).

    No Alembic or :mod:`ast` import; ``tests/store/test_lite.py`` checks it against Alembic's head.
    """
    versions = Path(__file__).parents[1] / "db" / "migrations" / "versions"
    return max(name[:4] for name in os.listdir(versions) if name[:4].isdigit() and name.endswith(".py"))


class _Connection:
    """One read-only DB-API connection and its placeholder (sqlite3: ``?``; psycopg: ``%s``)."""

    def __init__(self, raw: Any, *, sqlite: bool) -> None:
        self.raw = raw
        self.sqlite = sqlite

    def rows(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        """Every row of one statement, its values bound (never formatted into the SQL)."""
        cur = self.raw.cursor()
        try:
            cur.execute(sql if self.sqlite else sql.replace("?", "%s"), params)
            return list(cur.fetchall())
        finally:
            cur.close()

    def close(self) -> None:
        """End the read transaction (nothing was written) and the connection."""
        self.raw.rollback()
        self.raw.close()


def _connect(url: str) -> _Connection | None:
    """A read-only connection for the URLs read here exactly as SQLAlchemy would; None for the others."""
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return None  # the full store refuses such a URL with its own message
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    if scheme in ("sqlite", "sqlite+pysqlite"):
        return _connect_sqlite(rest)
    if scheme == "postgresql+psycopg":
        import psycopg

        raw = psycopg.connect(f"postgresql://{rest}")
        raw.read_only = True
        return _Connection(raw, sqlite=False)
    return None


def _connect_sqlite(rest: str) -> _Connection | None:
    """``sqlite:///PATH`` of an existing file, opened read-only (``mode=ro``: never written, never created)."""
    import sqlite3

    from gpuseat.db import SQLITE_MAGIC, busy_timeout

    path = rest[1:] if rest.startswith("/") else ""
    if not path or path == ":memory:" or any(ch in path for ch in "?%#~"):
        return None  # in memory, options, quoted or ~ paths: the full store reads those
    try:
        with open(path, "rb") as fh:
            if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return None
            if os.fstat(fh.fileno()).st_uid != os.geteuid():
                # a read-only connection leaves SQLite's -wal and -shm files behind, owned by whoever read;
                # root's (sudo gpuseat …) would lock the owner out: the full store hands them back instead
                return None
    except OSError:
        return None
    raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=busy_timeout(), isolation_level=None)
    raw.execute("BEGIN")  # one read transaction for both answers (WAL: never waits for a writer)
    return _Connection(raw, sqlite=True)


def _read(conn: _Connection, course: str | None) -> SeatStatus | None:
    """The seats and last activity of the course in one read transaction (None: not at the head revision)."""
    if conn.rows(_REVISION) != [(head_revision(),)]:
        return None
    key = _course_key(conn, course)
    seats = [SeatView.from_row(key, row[:_HOLDER], *row[_HOLDER:]) for row in conn.rows(_SEATS, key)]
    last: dict[int, float | None] = {s.id: None for s in seats}
    for seat_id, minute in conn.rows(_ROLLED, key):
        last[int(seat_id)] = float(minute * 60 + 59)  # the end of the last busy minute
    for seat_id, ts in conn.rows(_RAW, True, key):
        prev = last.get(int(seat_id))
        last[int(seat_id)] = float(ts) if prev is None else max(prev, float(ts))
    closed = None
    if any(s.participant for s in seats):
        [(text, timezone)] = conn.rows(_COURSE_FILE, key)

        def now() -> datetime:
            [(clock,)] = conn.rows(_CLOCK[0] if conn.sqlite else _CLOCK[1])
            return datetime.fromtimestamp(float(clock), UTC)

        closed = access_closed(text, timezone, now)
    from gpuseat.engines.host.others import LOCAL

    local = any(s.engine in LOCAL and s.participant for s in seats)
    sql = _HELD.format(engines=", ".join("?" for _ in LOCAL))
    held = tuple(
        dict(zip(_HELD_NAMES, (*row[:5], _utc(_stored_time(row[5]))), strict=True))
        for row in (conn.rows(sql, *LOCAL, key, *LOCAL) if local else ())
    )
    return SeatStatus(seats, last, closed, held)


def _course_key(conn: _Connection, course: str | None) -> str:
    """The course's key, chosen and refused with the store's own errors (``store.rows._course``)."""
    if course is not None:
        if conn.rows(_COURSE, course):
            return course
        from gpuseat.store.rows import no_course  # an error: the full store's import cost no longer matters

        raise no_course(course, [k for (k,) in conn.rows(_COURSE_KEYS)])
    keys = [k for (k,) in conn.rows(_FIRST_COURSES)]
    if len(keys) == 1:
        return str(keys[0])
    from gpuseat.store.rows import which_course

    raise which_course(keys)
