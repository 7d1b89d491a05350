"""What the monitor saw, per seat: live memory and utilisation, last GPU activity, daily use, open alerts.

The monitor writes ``samples`` (raw, last hour), ``minute_aggregates`` (rolled up) and ``alerts``; this
module only reads them, so the portal, the course report and the JupyterHub culler share one answer
to "when was this seat last busy?". Seats are named by their database id (``seats.id``): seat keys are
unique only within a course. Times are Unix seconds (UTC).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TypeVarTuple

from sqlalchemy import Float, cast, func, select

from gpuseat.db.models import AlertRecord, CourseRecord, MinuteAggregate, Participant, Sample, Seat
from gpuseat.store.base import Concern

if TYPE_CHECKING:
    from _typeshed import DataclassInstance
    from sqlalchemy import SQLColumnExpression
    from sqlalchemy.sql import Select


_Ts = TypeVarTuple("_Ts")

LIVE_WINDOW_S = 300  # a reading older than this is not "live" any more


class _AsDict:
    """One ``to_dict()`` per result type (the JSON shape of the portal's API and the report)."""

    __slots__ = ()

    def to_dict(self: DataclassInstance) -> dict[str, object]:
        """The fields as a plain dict."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SeatLive(_AsDict):
    """The latest reading of one seat's device."""

    seat_id: int
    at: int  # Unix seconds of the reading
    memory_used_mib: int | None
    memory_total_mib: int | None
    utilization_gpu: int | None
    processes: int
    foreign_processes: int
    active: bool


@dataclass(frozen=True, slots=True)
class SeatDay(_AsDict):
    """One seat over one UTC day: sampled hours, hours in use, mean utilisation."""

    seat_id: int
    day: int  # Unix day number (seconds // 86400)
    sampled_hours: float
    active_hours: float
    utilization_avg: float | None

    @property
    def active_share(self) -> float:
        """Share of the sampled time the seat was in use (0 with no samples)."""
        return self.active_hours / self.sampled_hours if self.sampled_hours else 0.0


@dataclass(frozen=True, slots=True)
class OpenAlert(_AsDict):
    """An alert the monitor raised and has not cleared."""

    kind: str  # idle | memory | foreign | gpu_lost
    key: str
    seat: str | None
    participant: str | None
    message: str
    raised_at: float
    seat_id: int | None = None


def _only(q: Select[*_Ts], column: SQLColumnExpression[int | None], seat_ids: Iterable[int] | None) -> Select[*_Ts]:
    if seat_ids is None:
        return q
    return q.where(column.in_(list(seat_ids)))


def daily_of(
    conn: Any,
    *,
    seat_ids: Iterable[int] | None = None,
    since: float | None = None,
    participant_ids: Iterable[int] | None = None,
) -> list[SeatDay]:
    """:meth:`Activity.daily` on an open connection or session (a page reads it with its other rows);
    ``participant_ids``: only the minutes the monitor credited to them (on whichever seat they held then)."""
    day = (MinuteAggregate.minute // 1440).label("day")
    share = cast(MinuteAggregate.active_samples, Float) / MinuteAggregate.samples
    q = select(
        MinuteAggregate.seat_id,
        day,
        func.count(),
        func.sum(share),
        func.avg(MinuteAggregate.utilization_avg),
    ).where(MinuteAggregate.seat_id.is_not(None), MinuteAggregate.samples > 0)
    q = _only(q, MinuteAggregate.seat_id, seat_ids)
    q = _only(q, MinuteAggregate.participant_id, participant_ids)
    if since is not None:
        q = q.where(MinuteAggregate.minute >= int(since) // 60)
    q = q.group_by(MinuteAggregate.seat_id, day).order_by(MinuteAggregate.seat_id, day)
    return [
        SeatDay(int(s), int(d), int(n) / 60.0, float(a or 0.0) / 60.0, None if u is None else float(u))
        for s, d, n, a, u in conn.execute(q)
    ]


class Activity(Concern):
    """Read-only queries on the monitor's tables (SQLite or PostgreSQL, any number of monitor hosts)."""

    def live(
        self, *, seat_ids: Iterable[int] | None = None, now: float | None = None, window_s: int = LIVE_WINDOW_S
    ) -> dict[int, SeatLive]:
        """The newest raw sample per seat taken within ``window_s`` of ``now`` (default: the newest sample).

        A seat served by several devices (or hosts) reports its newest reading.
        """
        with self._database.engine.connect() as conn:
            if now is None:
                latest = conn.scalar(select(func.max(Sample.ts)))
                if latest is None:
                    return {}
                now = float(latest)
            newest_q = (
                select(Sample.seat_id, func.max(Sample.ts).label("ts"))
                .where(Sample.seat_id.is_not(None), Sample.ts >= int(now) - window_s, Sample.ts <= int(now))
                .group_by(Sample.seat_id)
            )
            newest = _only(newest_q, Sample.seat_id, seat_ids).subquery()
            q = (
                select(
                    Sample.seat_id,
                    Sample.ts,
                    Sample.memory_used_mib,
                    Sample.memory_total_mib,
                    Sample.utilization_gpu,
                    Sample.processes,
                    Sample.foreign_processes,
                    Sample.active,
                )
                .join(newest, (newest.c.seat_id == Sample.seat_id) & (newest.c.ts == Sample.ts))
                .order_by(Sample.seat_id, Sample.id)
            )
            out: dict[int, SeatLive] = {}
            for row in conn.execute(q):
                seat = int(row[0] or 0)
                out[seat] = SeatLive(seat, int(row[1]), row[2], row[3], row[4], int(row[5]), int(row[6]), bool(row[7]))
        return out

    def last_active(self, *, seat_ids: Iterable[int] | None = None) -> dict[int, float | None]:
        """When each seat was last in use (a process held it or it was busy); None if never seen in use.

        Raw samples give the second; rolled-up minutes give the end of the last busy minute.
        """
        ids = None if seat_ids is None else list(seat_ids)
        raw = _only(
            select(Sample.seat_id, func.max(Sample.ts)).where(Sample.active.is_(True), Sample.seat_id.is_not(None)),
            Sample.seat_id,
            ids,
        ).group_by(Sample.seat_id)
        rolled = _only(
            select(MinuteAggregate.seat_id, func.max(MinuteAggregate.minute)).where(
                MinuteAggregate.active_samples > 0, MinuteAggregate.seat_id.is_not(None)
            ),
            MinuteAggregate.seat_id,
            ids,
        ).group_by(MinuteAggregate.seat_id)
        seats = _only(select(Seat.id), Seat.id, ids)
        with self._database.engine.connect() as conn:
            out: dict[int, float | None] = {int(s): None for s in conn.scalars(seats)}
            for seat_id, minute in conn.execute(rolled):
                assert seat_id is not None  # both queries keep only rows with a seat (seat_id IS NOT NULL)
                out[int(seat_id)] = float(minute * 60 + 59)
            for seat_id, ts in conn.execute(raw):
                assert seat_id is not None
                prev = out.get(int(seat_id))
                out[int(seat_id)] = float(ts) if prev is None else max(prev, float(ts))
        return out

    def idle_seats(self, since: float, *, seat_ids: Iterable[int] | None = None) -> list[int]:
        """Seats not in use at any time from ``since`` on (never-used seats included), by id."""
        return sorted(s for s, at in self.last_active(seat_ids=seat_ids).items() if at is None or at < since)

    def daily(self, *, seat_ids: Iterable[int] | None = None, since: float | None = None) -> list[SeatDay]:
        """Use per seat per UTC day from the minute aggregates (sorted by seat, then day).

        Each aggregated minute counts as one minute sampled; its in-use share is active/all samples.
        """
        with self._database.engine.connect() as conn:
            return daily_of(conn, seat_ids=seat_ids, since=since)

    def participant_hours(self, course: str, *, participant: str | None = None) -> dict[str, tuple[float, float]]:
        """Hours in use and hours sampled per participant of ``course`` (of one, when given): the minutes the
        monitor credited to each (whoever held the seat in that minute), on every seat they held, not the
        history of the seat they hold now. Participants without such minutes are left out."""
        share = cast(MinuteAggregate.active_samples, Float) / MinuteAggregate.samples
        q = (
            select(Participant.key, func.count(), func.sum(share))
            .join(Participant, Participant.id == MinuteAggregate.participant_id)
            .join(CourseRecord, CourseRecord.id == Participant.course_id)
            .where(CourseRecord.key == course, MinuteAggregate.samples > 0)
        )
        if participant is not None:
            q = q.where(Participant.key == participant)
        with self._database.engine.connect() as conn:
            rows = conn.execute(q.group_by(Participant.key)).all()
        return {str(k): (float(a or 0.0) / 60.0, int(n) / 60.0) for k, n, a in rows}

    def open_alerts(self, *, seat_ids: Iterable[int] | None = None) -> list[OpenAlert]:
        """Alerts not yet cleared, oldest first; ``seat_ids`` limits them to those seats and to the
        seat-less alerts (a lost GPU) of their courses, so one course never sees another's alerts."""
        q = select(
            AlertRecord.kind,
            AlertRecord.key,
            AlertRecord.seat,
            AlertRecord.participant,
            AlertRecord.message,
            AlertRecord.raised_at,
            AlertRecord.seat_id,
        ).where(AlertRecord.cleared_at.is_(None))
        if seat_ids is not None:
            ids = list(seat_ids)
            courses = select(Seat.course_id).where(Seat.id.in_(ids))
            q = q.where(
                AlertRecord.seat_id.in_(ids) | (AlertRecord.seat_id.is_(None) & AlertRecord.course_id.in_(courses))
            )
        with self._database.engine.connect() as conn:
            return [OpenAlert(*row) for row in conn.execute(q.order_by(AlertRecord.raised_at, AlertRecord.id))]
