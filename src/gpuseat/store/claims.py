"""A seat claim in one SQL statement: which seat suits whom is decided by the database, not by Python.

The claim used to load the course's seats through the ORM and rank them in Python on every call (five
round trips and most of a CPU-millisecond per claim). Here the rules of :mod:`gpuseat.core.seating`
(group reservation, GPU memory, isolation rank, guest OS, the preference order) are SQL expressions,
so a claim is:

* PostgreSQL: one statement, one round trip (autocommit): CTEs find the participant and the seat they
  hold, pick the best free suitable seat ``FOR UPDATE SKIP LOCKED`` (concurrent claims take different
  seats instead of queueing), insert the assignment and the ``events`` row, and return the seat (or,
  when none was taken, whether a suitable seat is free, a locked one included, and whether the course
  has any seat, so "being claimed right now: try again" and "no free seat" need no second round trip);
* SQLite: a lock-free read of the participant and their seat, then ``BEGIN IMMEDIATE`` and one
  ``INSERT … SELECT … ORDER BY … LIMIT 1 RETURNING`` plus the ``events`` row. Claims queue for the one
  writer (:mod:`gpuseat.store.turns`), and the claim whose turn it is takes the seats of the claims
  queued behind it in the same transaction (one commit for up to :data:`SERVE` + 1 claims).

The partial unique indexes on ``assignments`` stay the last word: a claim that loses a race fails with
an integrity error and is tried again, so no code path can hand out a seat twice. Failures (unknown
participant or course, an archived course, no free seat) are diagnosed only after the fast path found
nothing, with the same messages as the rest of the store. The statements themselves are in
:mod:`gpuseat.store.claim_sql`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, OperationalError

from gpuseat.core.seating import isolation_rank
from gpuseat.errors import InputError, NoFreeSeat, NotFound, StoreBusy, StoreError, did_you_mean
from gpuseat.store.claim_sql import (
    ANY_SEAT,
    SEAT_COLUMNS,
    SQLITE_EVENT,
    SQLITE_LOOKUP,
    SQLITE_SEAT,
    SQLITE_STEPPED,
    SQLITE_TAKE,
    pg_claim_sql,
)
from gpuseat.store.rows import STEP_S, no_course, which_course  # STEP_S: a clock behind by more is logged as a step
from gpuseat.store.turns import Turns
from gpuseat.store.views import SeatView

if TYPE_CHECKING:
    from gpuseat.store.db import Database

__all__ = ["Claimed", "claim", "close", "forget_course", "warm"]

RETRIES = 200  # lost races (a seat taken between this statement's snapshot and its lock) are retried


@dataclass(frozen=True)
class Claimed:
    """What a claim found or took: the seat row (its values in :data:`SEAT_COLUMNS` order, as the
    database returned them), who holds it, since when, how."""

    course: str
    participant: str
    seat: tuple[Any, ...]
    since: datetime
    mode: str
    new: bool

    def view(self) -> SeatView:
        """The seat view of the claim, built from the row directly (no ORM object or namespace in
        between: this runs once per claim)."""
        return SeatView.from_row(self.course, self.seat, self.participant, self.since, self.mode)


@dataclass(frozen=True)
class _Course:
    id: int
    key: str
    needs: dict[str, tuple[float, int, int]]  # group → (min GPU memory, isolation rank, needs a VM)
    needs_json: str  # the same, as the PostgreSQL claim's :needs parameter


# -- per database state ---------------------------------------------------------------------------------

_courses: weakref.WeakKeyDictionary[Database, dict[str, _Course]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def forget_course(db: Database, key: str | None = None) -> None:
    """Drop what claims remember about a course (after it is deleted, archived or imported again)."""
    with _lock:
        cached = _courses.get(db)
        if cached is not None:
            if key is None:
                cached.clear()
            else:
                cached.pop(key, None)


def close(db: Database) -> None:
    """Release what claims hold for ``db`` (its claim lanes on either database); called by
    ``Database.close``."""
    with _lock:
        _courses.pop(db, None)
        lanes = _lanes.pop(db, None)
    if lanes is not None:
        _close_lanes(lanes)


def _needs(summary: Mapping[str, Any] | None) -> dict[str, tuple[float, int, int]]:
    from gpuseat.core.needs import SeatNeed  # Pydantic: only when a claim reads a course's needs

    out = {}
    for g in (summary or {}).get("groups", ()):
        need = SeatNeed.model_validate({k: v for k, v in g.items() if k in SeatNeed.model_fields})
        out[g["name"]] = (need.min_gpu_memory_gb, isolation_rank(need.isolation), int(need.guest_os == "windows"))
    return out


def _course(db: Database, key: str | None) -> _Course:
    """The course's id and per-group needs (kept per store for a named course; None is looked up)."""
    if key is not None:
        with _lock:
            found = _courses.get(db, {}).get(key)
        if found is not None:
            return found
    with db.read() as s:
        if key is None:
            rows = s.execute(text("SELECT id, key, summary FROM courses ORDER BY key LIMIT 11")).all()
            if len(rows) != 1:
                raise which_course([str(r[1]) for r in rows])
            row: Any = rows[0]
        else:
            row = s.execute(text("SELECT id, key, summary FROM courses WHERE key = :k"), {"k": key}).first()
            if row is None:
                raise no_course(key, list(s.execute(text("SELECT key FROM courses ORDER BY key")).scalars()))
    summary = row[2] if isinstance(row[2], dict) else json.loads(row[2] or "{}")
    needs = _needs(summary)
    found = _Course(int(row[0]), str(row[1]), needs, json.dumps({g: list(v) for g, v in needs.items()}))
    if key is not None:
        with _lock:
            _courses.setdefault(db, {})[key] = found
    return found


@dataclass
class _PgLane:
    """One claim connection of a PostgreSQL store (psycopg's own, no SQLAlchemy pool in between) and the
    cursor the claim runs on (a raw one: ``$n`` placeholders go to the server untouched)."""

    conn: Any  # psycopg.Connection
    cur: Any  # psycopg.RawCursor

    def close(self) -> None:
        self.conn.close()


# a store's claim lanes, free for the next claim (of one kind: the store's database)
_lanes: weakref.WeakKeyDictionary[Database, list[Any]] = weakref.WeakKeyDictionary()
_L = TypeVar("_L")  # a lane of either kind


def _lanes_of(db: Database) -> list[Any]:
    with _lock:
        lanes = _lanes.get(db)
        if lanes is None:
            lanes = _lanes[db] = []
            weakref.finalize(db, _close_lanes, lanes)
        return lanes


def _close_lanes(lanes: list[Any]) -> None:
    while lanes:
        lanes.pop().close()


def _free_lane(db: Database, new: Callable[[Database], _L]) -> tuple[list[Any], _L]:
    """A free claim lane of the store (a new one when every lane is busy) and the list to hand it back to;
    ``list.pop`` is atomic, so two concurrent claims never take the same lane."""
    lanes = _lanes_of(db)
    try:
        return lanes, lanes.pop()
    except IndexError:
        return lanes, new(db)


def _new_pg_lane(db: Database) -> _PgLane:
    """A claim connection: autocommit (the one statement is the whole transaction, one round trip), the
    claim prepared at its first use and planned once for any parameters.

    By default psycopg prepares a statement at its sixth run and the server then plans it anew for
    each of five more runs before it keeps a generic plan; the claim's plan costs about a millisecond,
    more than the claim itself, so a process that claims a few dozen seats (a hub's worker, one of 64
    benchmark writers) spent most of its time planning. The statement is written for the generic plan
    (one-value subqueries, partial indexes in preference order); ``enable_seqscan = off`` keeps that
    plan on the indexes even when it is made while ``assignments`` is empty (a fresh course).
    """
    import psycopg

    engine = db.engine
    args, kwargs = engine.dialect.create_connect_args(engine.url)  # what SQLAlchemy itself would connect with
    try:
        conn = psycopg.connect(*args, autocommit=True, **kwargs)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute("SET enable_seqscan = off")
        # no JIT: with sequential scans off, a scan with no index (the events trigger's look at agent_leases)
        # is costed past jit_above_cost and was compiled at every claim: 61-82 ms of a 68 ms claim
        conn.execute("SET jit = off")
        conn.execute(f"SET lock_timeout = {db.wait_ms}")  # the store's own wait for a lock (a LOCK TABLE: forever)
        conn.prepare_threshold = 0  # from here on: the claim statement alone
    except psycopg.OperationalError as exc:
        raise StoreError(
            f"cannot reach the course database: {(str(exc).strip().splitlines() or ['no answer'])[0]}",
            where=engine.url.render_as_string(hide_password=True),
            fix="check --db / GPUSEAT_DB_URL, that the server runs and accepts you",
        ) from None
    return _PgLane(conn, psycopg.RawCursor(conn))


# -- the claim -----------------------------------------------------------------------------------------


def claim(db: Database, course: str | None, who: str, *, mode: str, actor: str) -> Claimed:
    """The seat ``who`` holds in ``course``, else the best free seat that suits their group, taken now.

    ``db`` is the store's :class:`~gpuseat.store.db.Database` (its sessions, engine and writer queue). Raises
    :class:`NotFound` (course or participant), :class:`InputError` (archived course) or
    :class:`NoFreeSeat` (with the reason), never a double assignment.
    """
    postgres = db.engine.dialect.name == "postgresql"
    stale = False
    for _attempt in range(RETRIES):
        info = _course(db, course)
        try:
            got = _claim_pg(db, info, who, mode, actor) if postgres else _claim_sqlite(db, info, who, mode, actor)
        except (IntegrityError, sqlite3.IntegrityError, _LostRace):
            # another claim took that seat (or this participant's other claim won): look again. The
            # SQLite take runs on sqlite3 itself, so its unique-index error is sqlite3's own.
            continue
        except OperationalError as exc:
            if not exc.connection_invalidated:
                raise
            continue  # the server dropped a pooled connection: a new one is taken
        if got == "retry":
            time.sleep(random.uniform(0.001, 0.005))  # every suitable free seat is being claimed right now
            continue
        if got is None:
            if not stale and course is not None:  # the course may have been deleted and imported again
                stale = True
                forget_course(db, course)
                continue
            _diagnose(db, info, who)
        assert isinstance(got, Claimed)
        return got
    raise StoreError(
        f"could not claim a seat after {RETRIES} tries (heavy contention)", where=f"participant {who}", fix="try again"
    )


WARM_UP = "gpuseat warm-up"  # no participant's key, email or Unix user can hold a space


def warm(db: Database, course: str | None) -> None:
    """Open a claim lane and run the claim once for nobody, so the database has the statement planned
    before the first participant asks (a hub at start-up); writes nothing."""
    info = _course(db, course)
    if db.engine.dialect.name == "postgresql":
        _claim_pg(db, info, WARM_UP, "pool", WARM_UP)
    else:
        _claim_sqlite(db, info, WARM_UP, "pool", WARM_UP)


def _params(info: _Course, who: str, mode: str, actor: str) -> dict[str, Any]:
    return {
        "cid": info.id,
        "ckey": info.key,
        "who": who,
        "email": who.lower(),
        "mode": mode,
        "actor": actor[:128],
        "now": datetime.now(UTC),
        "detail": _detail(mode),
    }


@functools.cache
def _detail(mode: str) -> str:
    return json.dumps({"mode": mode})


def _need(info: _Course, group: str | None) -> dict[str, Any]:
    mem, iso, win = info.needs.get(group, (0.0, 0, 0)) if group is not None else (0.0, 0, 0)
    return {"grp": group, "mem": mem, "iso": iso, "win": win}


@dataclass
class _Lane:
    """One claim connection of a SQLite file store (sqlite3's own, no SQLAlchemy pool in between) and its
    place in the store's writer queue: a claim takes and gives turns without opening the queue file."""

    conn: sqlite3.Connection
    turns: Turns
    takes: int = 0  # seats taken on this lane since it last copied the write-ahead log (see CHECKPOINT_EVERY)

    def close(self) -> None:
        self.conn.close()
        self.turns.close()


# SQLite copies the write-ahead log into the database file (a checkpoint, with an fsync) inside the commit
# that crosses 1,000 pages (about 80 claims), while that claim holds the writer queue and every other
# claim waits. Lanes turn that off and copy after their turn instead, every so many seats taken (PASSIVE:
# it never waits for a reader or writer); the store's other connections keep SQLite's own threshold.
# 10,000 claims by 16 processes: 5,600–6,100 → 7,200–7,300 claims/s (docs/results.md, 2026-12-04).
CHECKPOINT_EVERY = 64


def _new_lane(db: Database) -> _Lane:
    from gpuseat.db import _sqlite_pragmas

    conn = sqlite3.connect(
        str(db.engine.url.database), timeout=db.wait_s, isolation_level=None, check_same_thread=False
    )
    _sqlite_pragmas(conn, None)
    conn.execute("PRAGMA wal_autocheckpoint=0")  # the lane checkpoints after its turn (CHECKPOINT_EVERY)
    return _Lane(conn, db.turns())


def _claim_sqlite(db: Database, info: _Course, who: str, mode: str, actor: str) -> Claimed | str | None:
    """The claim on a lane of the store (one per concurrent claim, kept for the next), or on the engine's
    connection for an in-memory store (that connection is the database)."""
    p = _params(info, who, mode, actor)
    now = p["now"]
    p["now"] = _sqlite_time(now)
    if db.lock_path is None:
        pooled = db.engine.raw_connection()
        try:
            return _claim_on(db, pooled.driver_connection, None, info, p, now)
        finally:
            pooled.close()
    lanes, lane = _free_lane(db, _new_lane)
    try:
        got = _claim_on(db, lane.conn, lane.turns, info, p, now)
        if got is not None and got.new:
            lane.takes += 1
            if lane.takes >= CHECKPOINT_EVERY:  # after the turn: the next claim need not wait for the copy
                lane.takes = 0
                lane.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").close()
        return got
    finally:
        if lane.conn.in_transaction:  # never hand on a lane inside a transaction
            lane.close()
        else:
            lanes.append(lane)


def _begin(db: Database, raw: Any, turns: Turns | None, ask: Callable[[], bytes] | None = None) -> bytes | None:
    """Take this lane's turn in the store's writer queue (:mod:`gpuseat.store.turns`; nothing to wait
    for in memory), then the write lock (``BEGIN IMMEDIATE``); the caller gives the turn on after the
    commit.

    The queue hands the lock on as soon as it is free, where SQLite's busy handler sleeps 1, 2, 5, 10 …
    100 ms between tries, and in the order writers came (docs/results.md, 2026-12-04: with 1,000
    participants it gave 2–3× the claims/s and a fifth of the p99 of SQLite's busy handler; the
    ``flock`` queue before it let the process that had just let go take the turn again, which made the
    p99 with 10,000 participants and 16 writers 2.3× the busy handler's).
    """
    if turns is not None:
        answer, left = db.take_turn(turns, ask)  # queue and lock: one wait in all
        if answer is not None:
            return answer
        raw.execute(f"PRAGMA busy_timeout={max(1, round(left * 1000))}").close()
    try:
        raw.execute("BEGIN IMMEDIATE")
    except BaseException as exc:
        if turns is not None:
            turns.give()
        if isinstance(exc, sqlite3.OperationalError):
            from gpuseat.db import sqlite_error

            raise (sqlite_error(str(exc), db.engine.url.database, db.wait_s) or exc) from None
        raise
    return None


def _claim_on(
    db: Database, raw: Any, turns: Turns | None, info: _Course, p: dict[str, Any], now: datetime
) -> Claimed | None:
    """Lookup without a lock, then the take and its events row under the write lock.

    The statements go to sqlite3 itself (it takes the same ``:name`` parameters): SQLAlchemy's
    per-statement and pool machinery cost more CPU than the statements, and on a busy machine that CPU
    is taken from the process that holds the one write lock. Under the lock (:func:`_begin`): the take,
    the taken seat's row, the events row, the same for the claims queued behind this one (:func:`_serve`),
    ``COMMIT``, nothing else; a claim that was served while it waited returns the seat it was sent. A wait
    for the lock that ends while the participant holds a seat (another claim of theirs took it) answers it.
    Reading the seat under the lock costs it about 3 µs and saves a read transaction of its own, whose
    start can stall behind a busy log (10,000 claims by 16 processes: p99 22–28 → 20–22 ms). A lost race
    (this participant's other claim took a seat first) is :class:`_LostRace`; a write lock held past the
    busy timeout is the store's clear error.
    """
    cur = raw.execute(SQLITE_LOOKUP, p)  # WAL: a reader never waits for the writer
    try:
        row = cur.fetchone()
    finally:
        cur.close()  # no read snapshot is carried into the write transaction that may follow
    if row is None:
        return None
    pid, pkey, group, held, since, held_mode = row
    if held is not None:  # the seat they hold
        seat = _seat_row(raw, held)
        if seat is None:  # released and removed since the lookup: look again
            raise _LostRace
        return Claimed(info.key, pkey, seat, _when(since), held_mode or "assigned", False)
    p.update(_need(info, group), pid=pid, pkey=pkey)
    try:
        answer = _begin(db, raw, turns, lambda: json.dumps([p[k] for k in _ASK]).encode())
    except StoreBusy:
        if _holds(raw, p):  # the wait ended as another claim of theirs (a double submit) took a seat: the
            raise _LostRace from None  # answer is that seat, not "busy, try again"
        raise
    if answer is not None:  # the claim before this one in the queue took the seat for this one
        return Claimed(info.key, pkey, tuple(json.loads(answer)), now, p["mode"], True)
    try:
        seat = _take(raw, p)
        if seat is None:
            if _holds(raw, p):  # a seat was taken for them since the lookup (a served claim whose answer
                raise _LostRace  # it missed): look again, and find it held
            any_seat = raw.execute(ANY_SEAT, p).fetchone()[0]
            raise _no_free_seat(info, pkey, group, bool(any_seat))
        if turns is not None:
            _serve(raw, turns)
        raw.execute("COMMIT")
        if turns is not None:
            with contextlib.suppress(OSError):  # undelivered: those claims find their seats held on retry
                turns.deliver()
    except BaseException as exc:
        if raw.in_transaction:
            raw.execute("ROLLBACK")
        if isinstance(exc, sqlite3.IntegrityError):
            raise _LostRace from None
        raise
    finally:
        if turns is not None:
            turns.give()
    since = _when(p["now"]) if p["now"] != _sqlite_time(now) else now  # the time stored, if the clock was behind
    return Claimed(info.key, pkey, seat, since, p["mode"], True)


def _take(raw: Any, p: dict[str, Any]) -> tuple[Any, ...] | None:
    """Under the write lock: take the best free suitable seat for ``p``'s participant and write its
    events row; the seat's row, or None when no seat suits."""
    took = raw.execute(SQLITE_TAKE, p).fetchone()
    if took is None:
        return None
    seat = _seat_row(raw, took[0])
    assert seat is not None  # taken in this transaction
    p["skey"] = seat[1]  # SEAT_COLUMNS: id, key, …
    if took[1] != p["now"]:  # the clock is behind the seat's or person's last end: that time was stored
        clock, p["now"] = p["now"], took[1]
        behind = (_when(took[1]) - _when(clock)).total_seconds()
        if behind > STEP_S:  # less: times taken before the write lock by concurrent writers, no step
            p["stepped"] = json.dumps({"clock": clock, "stored": took[1], "behind_s": round(behind, 6)})
            raw.execute(SQLITE_STEPPED, p)
    raw.execute(SQLITE_EVENT, p)
    return seat


# what a queued claim asks the claim before it to do (its parameters of SQLITE_TAKE and SQLITE_EVENT)
_ASK = ("cid", "ckey", "pid", "pkey", "grp", "mem", "iso", "win", "mode", "actor", "now", "detail")
SERVE = 32  # how many queued claims a claim takes seats for in its own transaction (docs/results.md)


def _serve(raw: Any, turns: Turns) -> None:
    """Take seats for the claims queued right behind this one, in this transaction (one commit, and
    no hand-over between processes per claim), each in a savepoint; stop at the first that gets none
    (no suitable seat, or the participant got one meanwhile): it and those after it claim themselves."""
    for ticket, request in turns.asking(SERVE):
        raw.execute("SAVEPOINT serve")
        try:
            seat = _take(raw, dict(zip(_ASK, json.loads(request), strict=True)))
        except (sqlite3.Error, ValueError, TypeError):  # refused (unique index, archived), or not a request
            seat = None
        if seat is None or not turns.answer(ticket, json.dumps(seat).encode()):
            raw.execute("ROLLBACK TO serve")
            raw.execute("RELEASE serve")
            return
        raw.execute("RELEASE serve")


def _sqlite_time(value: datetime) -> str:
    """A time as SQLAlchemy stores a DateTime on SQLite (``%Y-%m-%d %H:%M:%S.%f``, naive UTC)."""
    return value.replace(tzinfo=None).isoformat(" ", "microseconds")


def _when(value: Any) -> Any:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def _holds(raw: Any, p: dict[str, Any]) -> bool:
    """Under the write lock: whether the claim's participant holds a seat now."""
    cur = raw.execute(SQLITE_LOOKUP, p)
    try:
        row = cur.fetchone()
    finally:
        cur.close()
    return row is not None and row[3] is not None


def _seat_row(raw: Any, sid: int) -> tuple[Any, ...] | None:
    """The seat's columns for its view (the cursor closed at once: no snapshot is kept open)."""
    cur = raw.execute(SQLITE_SEAT, {"sid": sid})
    try:
        found: tuple[Any, ...] | None = cur.fetchone()
        return found
    finally:
        cur.close()


class _LostRace(Exception):
    """The claim statement lost a race (unique index) or its connection: try again."""


# the claim's columns: how, pkey, grp, the seat, valid_from, mode, and for "none": whether a suitable seat
# is free (a locked one included: being claimed right now, so try again) and whether the course has seats
_SEAT_AT = slice(3, 3 + len(SEAT_COLUMNS))


def _claim_pg(db: Database, info: _Course, who: str, mode: str, actor: str) -> Claimed | str | None:
    """The one statement, sent on a claim lane by the driver itself: the claim is the hottest path (every
    JupyterHub start), and SQLAlchemy's per-statement and pool machinery cost more CPU than the
    statement does on the server."""
    import psycopg

    p = _params(info, who, mode, actor)
    p["needs"] = info.needs_json
    sql, names = pg_claim_sql()
    lanes, lane = _free_lane(db, _new_pg_lane)
    try:
        found = lane.cur.execute(sql, [p[n] for n in names]).fetchone()
    except psycopg.errors.UniqueViolation:
        lanes.append(lane)
        raise _LostRace from None
    except psycopg.errors.LockNotAvailable:  # another transaction held a lock past the store's wait
        lanes.append(lane)  # autocommit: the statement was rolled back, the lane is fine
        from gpuseat.db import pg_lock_error

        raise pg_lock_error(db.engine, db.wait_s) from None
    except psycopg.OperationalError:
        lane.conn.close()  # a dropped connection (the server restarted, the backend was ended): a new lane
        raise _LostRace from None
    except BaseException:
        lane.conn.close()
        raise
    lanes.append(lane)
    if found is None:
        return None
    how, pkey, group, free, any_seat = found[0], found[1], found[2], found[-2], found[-1]
    if how != "none":
        seat = found[_SEAT_AT]
        return Claimed(info.key, pkey, seat, found[-4], found[-3] or "assigned", how == "new")
    if free:
        return "retry"
    raise _no_free_seat(info, pkey, group, bool(any_seat))


def _no_free_seat(info: _Course, pkey: str, group: str | None, any_seat: bool) -> NoFreeSeat:
    """The one "no free seat" error. Whether the course has seats at all, not how many: a count reads
    every seat of the course, and a full course answers it to every late claim (under the SQLite write
    lock, too)."""
    if not any_seat:
        return NoFreeSeat(
            f"no free seat for {pkey}: the course has no seats yet",
            where=f"course {info.key}",
            fix="add seats (gpuseat seats add)",
        )
    return NoFreeSeat(
        f"no free seat suits {pkey} (group {group or '-'}): every seat that suits them is taken or out of order",
        where=f"course {info.key}",
        fix="add seats (gpuseat seats add) or release one (gpuseat seats release)",
    )


def _diagnose(db: Database, info: _Course, who: str) -> None:
    """Raise why nothing was found: the course is archived, or no such participant."""
    with db.read() as s:
        archived = s.execute(text("SELECT archived_at FROM courses WHERE id = :cid"), {"cid": info.id}).first()
        if archived is not None and archived[0] is not None:
            raise archived_error(info.key)
        known = list(s.execute(text("SELECT key FROM participants WHERE course_id = :cid"), {"cid": info.id}).scalars())
    raise NotFound(
        f"no participant {who!r} in course {info.key!r}.{did_you_mean(who, known)}",
        where="participant",
        fix="give a participant's key, email or Unix user (gpuseat roster import adds them)",
    )


def archived_error(course: str | None) -> InputError:
    """The one message for a write to an archived course."""
    return InputError(
        f"{f'course {course!r}' if course else 'the course'} is archived (read-only): nothing was changed",
        where="course",
        fix="export it (gpuseat course export) or choose another course; archived courses take no changes",
    )
