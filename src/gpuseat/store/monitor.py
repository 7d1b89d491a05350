"""The monitor's tables: samples with downsampling, alerts, the seat map (one course's, by row id).

Downsampling: every sample is written raw; once a minute has passed, the raw samples of each
finished minute are rolled up into one ``minute_aggregates`` row per device (count, in-use count,
memory peak and mean, mean utilisation), and raw samples older than ``raw_keep_s`` (one hour) are
deleted. The rollup is done in SQL (``INSERT … SELECT … ON CONFLICT``), so it is the same on SQLite
and PostgreSQL. Many monitors may share one database: each writes, rolls up and prunes only the
devices of its own host (devices are keyed by host), so they never collide.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Integer, and_, cast, delete, func, insert, select, update

from gpuseat.db.models import (
    AlertRecord,
    Assignment,
    CourseRecord,
    Device,
    Event,
    MinuteAggregate,
    Participant,
    Sample,
    Seat,
)
from gpuseat.errors import StoreError
from gpuseat.readings import Alert, LeafReading, SeatEntry, SeatMap, UsageRow
from gpuseat.store.agents import UNPLANNED_ACTIONS
from gpuseat.store.base import Concern
from gpuseat.store.rows import no_course

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from gpuseat.store.facade import Store

RAW_KEEP_S = 3600
#: Routine events rows that change no seat, holder, participant or course the monitor reads (a seat's key,
#: device, host, profile; who holds it; the holder's login): an engine's pass (its own writes log their own
#: rows: a device adopted, a state, a way in), a check, a way in recorded, a request and its outcome, an idle
#: warning, a portal login. A one-course monitor reads its seats again on any other row of its course: a new
#: action reloads it until it is known to be routine and named here.
ROUTINE_ACTIONS = frozenset(
    {
        "engine.apply",
        "drift.reverted",
        "seat.check",
        "seat.delivery",
        "seat.connected",
        "seat.idle.warned",
        "seat.stopped",
        "seat.request",
        "seat.request.done",
        "seat.request.failed",
        *UNPLANNED_ACTIONS,
    }
)
SMALL_MAX = 32767  # SmallInteger columns
_NO_SEAT3: tuple[None, None, None] = (None, None, None)
_SAMPLE_COLUMNS = (
    "ts",
    "device_id",
    "seat_id",
    "participant_id",
    "memory_used_mib",
    "memory_total_mib",
    "utilization_gpu",
    "power_w",
    "temperature_c",
    "processes",
    "foreign_processes",
    "active",
)
#: PostgreSQL types of ``_SAMPLE_COLUMNS`` (the arrays of the one-statement insert are cast to them).
_SAMPLE_PG_TYPES = (
    "integer",
    "integer",
    "integer",
    "integer",
    "integer",
    "integer",
    "smallint",
    "double precision",
    "smallint",
    "smallint",
    "smallint",
    "boolean",
)
#: Columns of ``minute_aggregates`` in :class:`MinuteRow`'s order (``device_id`` for its ``device_uuid``), and
#: their PostgreSQL types (for :meth:`MonitorStore.add_minutes`' one-statement insert).
_MINUTE_COLUMNS = (
    "minute",
    "device_id",
    "seat_id",
    "participant_id",
    "samples",
    "active_samples",
    "memory_max_mib",
    "memory_avg_mib",
    "utilization_avg",
)
_MINUTE_PG_TYPES = (
    "integer",
    "integer",
    "integer",
    "integer",
    "smallint",
    "smallint",
    "integer",
    "integer",
    "smallint",
)
DEFAULT_COURSE = "default"


@dataclass(frozen=True, slots=True)
class MinuteRow:
    """One device-minute as the rollup leaves it (the demo seeds history with these)."""

    minute: int
    device_uuid: str
    seat_id: int | None
    participant_id: int | None
    samples: int
    active_samples: int
    memory_max_mib: int | None
    memory_avg_mib: int | None
    utilization_avg: int | None


class MonitorStore(Concern):
    """The monitor's side of the course database (samples, rollups, alerts), for one course or all.

    ``course`` scopes it: seat keys are unique only within a course, so samples and alerts are
    attributed through the seat map's row ids, or through this course's seat keys. Without a course
    a seat key that two courses share is attributed to neither (run the monitor with ``--course``).
    """

    def __init__(self, store: Store, *, course: str | None = None, raw_keep_s: int = RAW_KEEP_S) -> None:
        """``store.monitor`` is the one of all courses; :meth:`of_course` gives one course's."""
        super().__init__(store)
        self.raw_keep_s = raw_keep_s
        self.course = course
        self._devices: dict[tuple[str, str], int] = {}
        self._seat_ids: dict[str, tuple[int, int | None, int]] = {}
        self._holders: dict[int, tuple[list[float], list[int | None]]] = {}  # seat id → (change times, holder from)
        self._version: tuple[int | None, int | None] | None = None  # of the course data the two above were read at
        self._map_version: tuple[int | None, int | None] | None = None  # of the last seats_if_changed
        self._head: tuple[int | None, int | None] | None = None  # the course's newest events row, newest not routine
        self._first = float("inf")  # when the first of these seats was first assigned
        self._rolled: dict[str, int] = {}
        self._sample_stmt: str | None = None
        self._load_seat_ids()

    def of_course(self, course: str | None, *, raw_keep_s: int = RAW_KEEP_S) -> MonitorStore:
        """The monitor's side of one course (``None``: of all courses) on the same store."""
        return MonitorStore(self._store, course=course, raw_keep_s=raw_keep_s)

    def close(self) -> None:
        """Close the store it belongs to: the monitor loop owns the store it samples into."""
        self._store.close()

    # -- roster ------------------------------------------------------------------------------------

    def import_seats(self, entries: Iterable[SeatEntry], *, course: str | None = None) -> int:
        """Import a seats file into ``course`` (default: this store's course, else ``default``) through the
        course store (:meth:`store.seatfile.import_seat_file`: state machine and events).

        Returns how many seats were read. A participant named on two seats keeps the last one.
        """
        key = course or self.course or DEFAULT_COURSE
        count = self._store.seatfile.import_seat_file(key, entries, actor="monitor")
        if self.course is None:
            self.course = key
        self._load_seat_ids()
        return count

    def seat_map(self, *, allowed_users: Iterable[str] = (), course: str | None = None) -> SeatMap:
        """Seats with a device and their current participant (of one course, or of all), for attribution.

        The entries carry the seats' and participants' row ids, so samples land on exactly these rows.
        """
        q = (
            select(
                Seat.key,
                Seat.device_uuid,
                Seat.host,
                Seat.profile,
                Participant.key,
                Participant.unix_user,
                Seat.id,
                Participant.id,
                CourseRecord.key,
            )
            .select_from(Seat)
            .join(CourseRecord, CourseRecord.id == Seat.course_id)
            .outerjoin(Assignment, and_(Assignment.seat_id == Seat.id, Assignment.valid_to.is_(None)))
            .outerjoin(Participant, Participant.id == Assignment.participant_id)
            .where(Seat.device_uuid.is_not(None))
            .order_by(Seat.key)
        )
        course = course or self.course
        if course is not None:
            q = q.where(Seat.course_id == self._course_id(course))
        with self._database.engine.connect() as conn:
            rows = conn.execute(q).all()
        entries = [
            SeatEntry(
                seat=r[0],
                device_uuid=str(r[1]),
                host=r[2],
                profile=r[3],
                participant=r[4],
                user=r[5],
                seat_id=r[6],
                participant_id=r[7],
                course=r[8],
            )
            for r in rows
        ]
        return SeatMap(entries, allowed_users=allowed_users)

    def _load_seat_ids(self) -> None:
        """Seat key → (seat id, current participant id, course id) of this store's course.

        Without a course: of every course, leaving out keys that more than one course uses.
        """
        q = (
            select(Seat.key, Seat.id, Assignment.participant_id, Seat.course_id)
            .select_from(Seat)
            .outerjoin(Assignment, and_(Assignment.seat_id == Seat.id, Assignment.valid_to.is_(None)))
        )
        if self.course is not None:
            cid = self._course_id_or_none(self.course)
            if cid is None:
                self._seat_ids = {}
                self._load_holders()
                return
            q = q.where(Seat.course_id == cid)
        found: dict[str, tuple[int, int | None, int]] = {}
        shared: set[str] = set()
        with self._database.engine.connect() as conn:
            for key, sid, pid, cid in conn.execute(q):
                if key in found:
                    shared.add(key)
                found[key] = (sid, pid, cid)
        self._seat_ids = {k: v for k, v in found.items() if k not in shared}
        self._load_holders()

    def _changes(self, conn: Connection) -> tuple[int | None, int | None]:
        """Where the course data stands: every change of seats, assignments or courses writes an events row
        (and assignments have ids of their own), so a newer one means the seats or their holders may differ.

        A monitor of one course asks only of its course: its newest events row that is not routine
        (:data:`ROUTINE_ACTIONS`: an engine's pass, a check; a move, a release, an assign, seats added or
        removed, the course created, archived or deleted are not, each logged under the course's key, which its
        events rows keep once it is deleted) and the newest assignment of its seats; another course's writes
        leave both alone. Asked each time: the course's newest events row (one index entry,
        ``ix_events_course_id``, migration 0020) and the assignment (one look-up of the assignments' seat index
        per seat of the course). Only when that events row is new since the last question, the newest one not
        routine: the same index read backwards from the top, past the routine rows above it. Without a course:
        of the whole store (every course's change, routine too)."""
        if self.course is None:
            newest_event = select(func.max(Event.id)).scalar_subquery()
            row = conn.execute(select(newest_event, func.max(Assignment.id))).one()
            return row[0], row[1]
        newest_event = select(func.max(Event.id)).where(Event.course_key == self.course).scalar_subquery()
        seats = select(Seat.id).join(CourseRecord, CourseRecord.id == Seat.course_id)
        newest_assignment = (
            select(func.max(Assignment.id))
            .where(Assignment.seat_id.in_(seats.where(CourseRecord.key == self.course)))
            .scalar_subquery()
        )
        head, assignment = conn.execute(select(newest_event, newest_assignment)).one()
        if self._head is not None and self._head[0] == head:
            changed = self._head[1]
        else:
            # asked again from the top, not from the row seen last: on PostgreSQL a row may commit after a
            # newer one was seen (its id taken first), and it is found at the next new row of the course
            changed = conn.scalar(
                select(Event.id)
                .where(Event.course_key == self.course, Event.action.not_in(sorted(ROUTINE_ACTIONS)))
                .order_by(Event.id.desc())
                .limit(1)
            )
            self._head = (head, changed)
        return changed, assignment

    def _load_holders(self) -> None:
        """Who held each seat when: per seat id, the times its holder changed and who held it from then on."""
        seat_ids = {sid for sid, _, _ in self._seat_ids.values()}
        holders: dict[int, tuple[list[float], list[int | None]]] = {}
        with self._database.engine.connect() as conn:
            self._version = self._changes(conn)
            q = select(Assignment.seat_id, Assignment.participant_id, Assignment.valid_from, Assignment.valid_to)
            q = q.where(Assignment.seat_id.in_(sorted(seat_ids)))  # this monitor's seats, not every course's
            for sid, pid, start, end in conn.execute(q.order_by(Assignment.seat_id, Assignment.valid_from)):
                times, who = holders.setdefault(int(sid), ([], []))
                t0 = _seconds(start)
                if times and times[-1] >= t0:  # a zero-length hold (given and taken back in one second)
                    times.pop()
                    who.pop()
                times.append(t0)
                who.append(int(pid))
                if end is not None:
                    times.append(_seconds(end))
                    who.append(None)
        self._holders = holders
        self._first = min((times[0] for times, _ in holders.values()), default=float("inf"))

    def refresh(self) -> bool:
        """Read the seats and their holders again when the course data changed since (a move, a release, a
        seat removed, a course deleted while the monitor runs); True when it did."""
        with self._database.engine.connect() as conn:
            changed = self._changes(conn) != self._version
        if changed:
            self._load_seat_ids()
        return changed

    def seats_if_changed(self) -> SeatMap | None:
        """The seat map again when the course data changed since the last call (None: unchanged); an empty
        one once the course is deleted. The running monitor's tick asks this (the writer has :meth:`refresh`)."""
        with self._database.engine.connect() as conn:
            version = self._changes(conn)
        if version == self._map_version:
            return None
        self._map_version = version
        if self.course is not None and self._course_id_or_none(self.course) is None:
            return SeatMap()
        return self.seat_map()

    def holder(self, seat_id: int, at: float, before: int | None = None) -> int | None:
        """The participant id that held the seat at Unix second ``at`` (None: nobody, or no such seat);
        ``before`` for a time before the course's first assignment (a replay of a recording older than the course)."""
        if at < self._first:
            return before
        found = self._holders.get(seat_id)
        if found is None:
            return None
        times, who = found
        i = bisect_right(times, at)
        return who[i - 1] if i else None

    # -- samples -----------------------------------------------------------------------------------

    def _device_id(
        self,
        conn: Connection,
        new: dict[tuple[str, str], int],
        host: str,
        uuid: str,
        name: str | None,
        parent: str | None,
        profile: str | None,
    ) -> int:
        key = (host, uuid)
        known = self._devices.get(key) or new.get(key)
        if known is None:
            conn.execute(
                self._database.insert(Device)
                .values(host=host, uuid=uuid, name=name, parent_uuid=parent, profile=profile)
                .on_conflict_do_nothing(index_elements=["host", "uuid"])
            )
            found = conn.scalar(select(Device.id).where(Device.host == host, Device.uuid == uuid))
            if found is None:
                raise StoreError(f"device {uuid} of {host} could not be stored")
            known = int(found)
            new[key] = known
        return known

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A write transaction; on SQLite it takes the write lock first (``BEGIN IMMEDIATE``), so
        concurrent monitors wait their turn (busy timeout) instead of failing on a stale snapshot."""
        with self._database.writer.connect() as conn:  # SQLite: the first statement begins IMMEDIATE
            yield conn
            conn.commit()

    def write(self, host: str, taken_at: float, states: Iterable[LeafReading]) -> None:
        """Store one sample per seat-sized device of ``host``, then roll up its finished minutes and prune.

        Safe for many monitors on one database: each touches only its own host's devices, a sample
        already stored (same device and second, e.g. a replay restarted after ``kill -9``) is skipped,
        and a minute rolled up again is recomputed rather than duplicated. All in one transaction, so
        a crash loses at most this tick.
        """
        ts = int(taken_at)
        new: dict[tuple[str, str], int] = {}
        self.refresh()
        devices, seat_ids, holder = self._devices, self._seat_ids, self.holder
        known = {sid for sid, _, _ in seat_ids.values()}
        with self._writing() as conn:
            rows: list[tuple[Any, ...]] = []
            append = rows.append
            for s in states:  # hundreds of rows a tick: plain tuples, Leaf's properties inlined
                leaf = s.leaf
                gpu, mig = leaf.gpu, leaf.mig
                uuid = leaf.uuid or gpu.uuid
                dev = devices.get((host, uuid))
                if dev is None:
                    dev = self._device_id(
                        conn,
                        new,
                        host,
                        uuid,
                        gpu.name,
                        gpu.uuid if uuid != gpu.uuid else None,
                        mig.profile if mig else None,
                    )
                entry = s.entry
                if entry is None:
                    seat_id = participant_id = None
                else:
                    if entry.seat_id is not None:
                        seat_id = entry.seat_id if entry.seat_id in known else None  # a seat removed since
                        participant_id = entry.participant_id
                    else:
                        seat_id, participant_id = seat_ids.get(entry.seat, _NO_SEAT3)[:2]
                    # who held the seat when the reading was taken, not when the monitor read its seats
                    participant_id = None if seat_id is None else holder(seat_id, ts, participant_id)
                used, total, util = (
                    (mig.memory_used_mib, mig.memory_total_mib, mig.utilization_gpu)
                    if mig
                    else (gpu.memory_used_mib, gpu.memory_total_mib, gpu.utilization_gpu)
                )
                temp = gpu.temperature_c
                procs = s.processes
                append(
                    (
                        ts,
                        dev,
                        seat_id,
                        participant_id,
                        None if used is None else round(used),
                        None if total is None else round(total),
                        None if util is None else round(util),
                        gpu.power_w,
                        None if temp is None else round(temp),
                        min(len(procs), SMALL_MAX),
                        min(sum(1 for a in procs if a.foreign), SMALL_MAX) if procs else 0,
                        s.active,
                    )
                )
            if rows:
                # The hot path (hundreds of rows a tick), no statement compilation. SQLite: the driver's
                # executemany of a prepared INSERT. PostgreSQL: one statement over one array per column
                # (``unnest``), one round trip instead of one executed statement per row.
                sql = self._sample_sql(conn)
                if conn.dialect.name == "postgresql":
                    conn.exec_driver_sql(sql, tuple(list(column) for column in zip(*rows, strict=True)))
                else:
                    conn.exec_driver_sql(sql, rows)
            minute = ts // 60
            rolled = self._rolled.get(host)
            if rolled is None or rolled < minute - 1:
                self._rollup(conn, host, minute, ts)
        self._devices.update(new)  # only after commit: a rolled-back id must not be reused

    def _sample_sql(self, conn: Connection) -> str:
        """``INSERT INTO samples … ON CONFLICT (device_id, ts) DO NOTHING`` in the driver's parameter style."""
        if self._sample_stmt is None:
            cols = ", ".join(_SAMPLE_COLUMNS)
            if conn.dialect.name == "postgresql":
                arrays = ", ".join(f"%s::{kind}[]" for kind in _SAMPLE_PG_TYPES)
                values = f"SELECT * FROM unnest({arrays})"
            else:
                mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
                values = f"VALUES ({', '.join([mark] * len(_SAMPLE_COLUMNS))})"
            self._sample_stmt = f"INSERT INTO samples ({cols}) {values} ON CONFLICT (device_id, ts) DO NOTHING"
        return self._sample_stmt

    def _rollup(self, conn: Connection, host: str, minute: int, now_ts: int) -> None:
        """Aggregate ``host``'s raw samples of every finished minute not yet aggregated; prune its old raw rows."""
        devices = select(Device.id).where(Device.host == host)
        last = self._rolled.get(host)
        if last is None:
            last = conn.scalar(select(func.max(MinuteAggregate.minute)).where(MinuteAggregate.device_id.in_(devices)))
        m = (Sample.ts // 60).label("minute")
        q = select(
            m,
            Sample.device_id,
            func.max(Sample.seat_id),
            func.max(Sample.participant_id),
            func.count(),
            func.sum(cast(Sample.active, Integer)),
            func.max(Sample.memory_used_mib),
            cast(func.avg(Sample.memory_used_mib), Integer),
            cast(func.avg(Sample.utilization_gpu), Integer),
        ).where(Sample.ts < minute * 60, Sample.device_id.in_(devices))
        if last is not None:
            q = q.where(Sample.ts >= (last + 1) * 60)
        q = q.group_by(m, Sample.device_id)
        stmt = self._database.insert(MinuteAggregate).from_select(list(_MINUTE_COLUMNS), q)  # the select's order
        stmt = stmt.on_conflict_do_update(
            index_elements=["minute", "device_id"],
            set_={c: getattr(stmt.excluded, c) for c in _MINUTE_COLUMNS[2:]},
        )
        conn.execute(stmt)
        conn.execute(delete(Sample).where(Sample.ts < now_ts - self.raw_keep_s, Sample.device_id.in_(devices)))
        self._rolled[host] = max(last if last is not None else minute - 1, minute - 1)

    def usage_rows(self, since: float | None = None, *, course: str | None = None) -> list[UsageRow]:
        """Minute aggregates (oldest first) with device, seat and participant names (of one course's seats)."""
        q = (
            select(
                MinuteAggregate.minute,
                Device.uuid,
                Seat.key,
                Participant.key,
                MinuteAggregate.samples,
                MinuteAggregate.active_samples,
                MinuteAggregate.memory_max_mib,
            )
            .join(Device, Device.id == MinuteAggregate.device_id)
            .outerjoin(Seat, Seat.id == MinuteAggregate.seat_id)
            .outerjoin(Participant, Participant.id == MinuteAggregate.participant_id)
            .order_by(MinuteAggregate.minute, Device.uuid)
        )
        if since is not None:
            q = q.where(MinuteAggregate.minute >= int(since) // 60)
        if course is not None:
            q = q.where(Seat.course_id == self._course_id(course))
        with self._database.engine.connect() as conn:
            return [UsageRow(*row) for row in conn.execute(q)]

    def _course_id(self, key: str) -> int:
        """A course's id; an unknown key is an input error naming the known ones."""
        found = self._course_id_or_none(key)
        if found is None:
            with self._database.engine.connect() as conn:
                known = list(conn.scalars(select(CourseRecord.key).order_by(CourseRecord.key)))
            raise no_course(key, known)
        return found

    def _course_id_or_none(self, key: str) -> int | None:
        with self._database.engine.connect() as conn:
            found = conn.scalar(select(CourseRecord.id).where(CourseRecord.key == key))
        return None if found is None else int(found)

    def add_minutes(self, rows: Iterable[MinuteRow]) -> int:
        """Store rolled-up minutes as the rollup would have left them (devices made as needed); returns
        how many. For seeding history (the demo) and imports; the monitor itself writes samples."""
        with self._writing() as conn:
            new: dict[tuple[str, str], int] = {}
            host = "history"
            batch: list[tuple[Any, ...]] = []
            append = batch.append
            known: dict[str, int] = {}  # device uuid → id: looked up once per device, not once per minute
            for r in rows:
                dev = known.get(r.device_uuid)
                if dev is None:
                    found = conn.scalar(select(Device.id).where(Device.uuid == r.device_uuid).limit(1))
                    dev = known[r.device_uuid] = (
                        int(found)
                        if found is not None
                        else self._device_id(conn, new, host, r.device_uuid, None, None, None)
                    )
                append(
                    (
                        r.minute,
                        dev,
                        r.seat_id,
                        r.participant_id,
                        r.samples,
                        r.active_samples,
                        r.memory_max_mib,
                        r.memory_avg_mib,
                        r.utilization_avg,
                    )
                )
            if batch:
                # tens of thousands of rows (the demo's week): no statement compilation nor per-row parameter
                # dicts, as in :meth:`write`. SQLite: the driver's executemany of a prepared INSERT, the rows in
                # the order given. PostgreSQL: one statement over one array per column (``unnest``).
                cols = ", ".join(_MINUTE_COLUMNS)
                if conn.dialect.name == "postgresql":
                    arrays = ", ".join(f"%s::{kind}[]" for kind in _MINUTE_PG_TYPES)
                    sql = f"INSERT INTO minute_aggregates ({cols}) SELECT * FROM unnest({arrays})"
                    conn.exec_driver_sql(sql, tuple(list(column) for column in zip(*batch, strict=True)))
                else:
                    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
                    sql = f"INSERT INTO minute_aggregates ({cols}) VALUES ({', '.join([mark] * len(_MINUTE_COLUMNS))})"
                    conn.exec_driver_sql(sql, batch)
        stored = len(batch)
        return stored

    def counts(self) -> dict[str, int]:
        """Row counts of the growing tables (for tests and the benchmark)."""
        with self._database.engine.connect() as conn:
            return {
                t.__tablename__: conn.scalar(select(func.count()).select_from(t)) or 0
                for t in (Sample, MinuteAggregate, AlertRecord, Device)
            }

    # -- alerts ------------------------------------------------------------------------------------

    def _place(self, conn: Connection, alert: Alert) -> tuple[int | None, int | None]:
        """(seat id, course id) of an alert: its seat in this store's course (or the only seat with that
        key); a GPU-lost alert belongs to the course whose seats use that GPU (when there is one)."""
        if alert.seat is not None:
            found = self._seat_ids.get(alert.seat)
            if found is not None:
                return found[0], found[2]
            return None, self._course_id_or_none(self.course) if self.course else None
        if self.course is not None:
            return None, self._course_id_or_none(self.course)
        children = select(Device.uuid).where(Device.parent_uuid == alert.key)
        courses = set(
            conn.scalars(
                select(Seat.course_id)
                .where((Seat.device_uuid == alert.key) | Seat.device_uuid.in_(children))
                .distinct()
            )
        )
        return None, courses.pop() if len(courses) == 1 else None

    def record_alert(self, alert: Alert) -> None:
        """Insert a raised alert with its seat and course, or stamp the open one of the same kind and key
        (of the same course) as cleared."""
        with self._database.engine.begin() as conn:
            seat_id, course_id = self._place(conn, alert)
            if alert.raised:
                conn.execute(
                    insert(AlertRecord).values(
                        kind=alert.kind,
                        key=alert.key,
                        seat=alert.seat,
                        seat_id=seat_id,
                        course_id=course_id,
                        participant=alert.participant,
                        message=alert.message,
                        raised_at=alert.at,
                    )
                )
            else:
                same_course = (
                    AlertRecord.course_id.is_(None) if course_id is None else AlertRecord.course_id == course_id
                )
                conn.execute(
                    update(AlertRecord)
                    .where(
                        AlertRecord.kind == alert.kind,
                        AlertRecord.key == alert.key,
                        AlertRecord.cleared_at.is_(None),
                        same_course,
                    )
                    .values(cleared_at=alert.at)
                )

    def open_alerts(self) -> list[tuple[str, str, str]]:
        """``(kind, key, message)`` of alerts not yet cleared (of this store's course, when it has one)."""
        q = select(AlertRecord.kind, AlertRecord.key, AlertRecord.message).where(AlertRecord.cleared_at.is_(None))
        if self.course is not None:
            q = q.where(AlertRecord.course_id == self._course_id_or_none(self.course))
        with self._database.engine.connect() as conn:
            return [(r[0], r[1], r[2]) for r in conn.execute(q.order_by(AlertRecord.id))]


def _seconds(value: datetime) -> float:
    """A stored time as Unix seconds (SQLite gives it back without its zone: it is UTC)."""
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
