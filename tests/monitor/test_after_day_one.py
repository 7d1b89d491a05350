"""Who used which GPU after day one: moves, releases and late readings while the monitor runs.

The readings are telegraf/datakit's real 8-GPU ``nvidia-smi -q -x`` capture (every GPU busy), stamped
minute by minute; the course is changed through the course store between ticks of one running monitor,
as an organizer changes it while ``gpuseat monitor`` runs. Each minute of GPU use must belong to the
participant who held the seat in that minute, or to nobody.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace
from pathlib import Path

from sqlalchemy import select, update

from gpuseat import nvsmi
from gpuseat.catalog.bundle import load_catalog
from gpuseat.core.roster import RosterText
from gpuseat.db import make_engine
from gpuseat.db.models import Assignment, Participant
from gpuseat.monitor.runner import Monitor
from gpuseat.monitor.usage import UNASSIGNED, summarize
from gpuseat.readings import SeatEntry, Snapshot
from gpuseat.services.report import build_digest
from gpuseat.services.survey import SurveyService
from gpuseat.store import open_monitor, open_store
from gpuseat.store.monitor import MonitorStore

from .conftest import FIXTURES

EXAMPLES = Path(__file__).parents[2] / "examples"
CAPTURE = nvsmi.parse_xml((FIXTURES / "datakit__gtx-8card.xml").read_text(encoding="utf-8"), host="gpu01")


class _Clocked:
    """The capture, stamped with the time the test sets (a monitor running behind, or on time)."""

    def __init__(self) -> None:
        self.at = 0.0

    def sample(self) -> Snapshot:
        return replace(CAPTURE, taken_at=self.at)

    def close(self) -> None:
        pass


def _running_monitor(url: str, since: float, ann_since: float | None = None) -> tuple[Monitor, _Clocked]:
    """A monitor of course c1 (ann on seat-01 from ``ann_since``, ben on seat-03 from ``since``, seat-02 free)."""
    gpu = [g.uuid for g in CAPTURE.gpus]
    with open_store(url, create=True) as store:
        store.courses.create_course(EXAMPLES / "course-2016.toml", key="c1")
        roster = "name,email,unix_user,key\nAnn,ann@example.org,ann,ann\nBen,ben@example.org,ben,ben\n"
        store.roster.import_roster("c1", RosterText(roster, where="c1.csv"))
    setup = open_monitor(url, course="c1")
    setup.import_seats(
        [
            SeatEntry("seat-01", gpu[0], "ann"),
            SeatEntry("seat-02", gpu[1], None),
            SeatEntry("seat-03", gpu[2], "ben"),
        ]
    )
    setup.close()
    with make_engine(url).begin() as conn:  # the course began before the monitor's first reading
        conn.execute(update(Assignment).values(valid_from=dt.datetime.fromtimestamp(since, dt.UTC)))
        if ann_since is not None:
            ann = select(Participant.id).where(Participant.key == "ann").scalar_subquery()
            at = dt.datetime.fromtimestamp(ann_since, dt.UTC)
            conn.execute(update(Assignment).where(Assignment.participant_id == ann).values(valid_from=at))
    monitor_store = open_monitor(url, course="c1")
    clock = _Clocked()
    monitor = Monitor(clock, monitor_store.seat_map(), store=monitor_store, reload_seats=monitor_store.seats_if_changed)
    return monitor, clock


def _tick_at(monitor: Monitor, clock: _Clocked, at: float) -> dict[str, str | None]:
    """One tick at ``at``; seat → participant as the tick shows them (top, /metrics, alerts)."""
    clock.at = at
    tick = monitor.tick()
    assert tick.stored
    return {s.entry.seat: s.entry.participant for s in tick.states if s.entry is not None}


def test_a_move_and_a_release_while_the_monitor_runs_credit_each_minute_to_its_holder(url):
    """ann moves from seat-01 to seat-02 and ben from seat-03 to seat-01 while the monitor runs (seat-03 is
    then nobody's); the first reading after the move was taken before it (the monitor runs behind)."""
    # the course store stamps the move with the database's clock, a few seconds from now: it must fall after the
    # late reading (minute -1, :30) and before minute +1. Counted from the minute 20 s ahead, it does whatever the
    # second now (at :55 the move came in the next minute, after the reading of minute +1: CI at c25a49f)
    now_minute = (int(time.time()) + 20) // 60
    monitor, clock = _running_monitor(url, (now_minute - 10) * 60, ann_since=(now_minute - 3) * 60)
    before = range(now_minute - 5, now_minute)
    after = range(now_minute + 1, now_minute + 6)
    try:
        for m in before:
            _tick_at(monitor, clock, m * 60)
        with open_store(url) as store:
            store.seats.move("c1", "ann", "seat-02")
            store.seats.move("c1", "ben", "seat-01")
            moved = store.requests.now().timestamp()
        assert (now_minute - 1) * 60 + 30 < moved < (now_minute + 1) * 60, (moved, now_minute)
        _tick_at(monitor, clock, (now_minute - 1) * 60 + 30)  # taken before the move, written after it
        for m in [*after, now_minute + 6]:  # the last one rolls up the minute before it
            shown = _tick_at(monitor, clock, m * 60)
            assert shown == {"seat-01": "ben", "seat-02": "ann", "seat-03": None}
    finally:
        monitor.close()

    with open_store(url) as store:
        rows = [r for r in store.monitor.usage_rows(course="c1") if r.seat]
    held = {(r.minute - now_minute, r.seat): (r.participant, r.samples, r.active_samples) for r in rows}
    expected = {}
    for m in before:  # minute -1 has the late reading too
        n = 2 if m == now_minute - 1 else 1
        expected[(m - now_minute, "seat-01")] = ("ann" if m >= now_minute - 3 else None, n, n)  # hers from -3
        expected[(m - now_minute, "seat-02")] = (None, n, n)
        expected[(m - now_minute, "seat-03")] = ("ben", n, n)
    for m in after:
        expected[(m - now_minute, "seat-01")] = ("ben", 1, 1)
        expected[(m - now_minute, "seat-02")] = ("ann", 1, 1)
        expected[(m - now_minute, "seat-03")] = (None, 1, 1)
    assert held == expected

    totals = {u.participant: u for u in summarize(rows)}
    assert round(totals["ann"].gpu_hours * 60, 6) == 8.0
    assert totals["ann"].seats == ("seat-01", "seat-02")
    assert round(totals["ben"].gpu_hours * 60, 6) == 10.0
    assert totals["ben"].seats == ("seat-01", "seat-03")
    assert round(totals[UNASSIGNED].gpu_hours * 60, 6) == 12.0  # seat-01 before ann, seat-02 before, seat-03 after

    # the course report's and the participant page's hours: their own minutes, not their seat's history
    with open_store(url) as store:
        digest = build_digest(store, SurveyService(store), load_catalog(), "c1", bench_results=[])
        report = {u.participant: (u.seat, round(u.active_hours * 60, 6)) for u in digest.usage}
        pages = {who: store.requests.page_of("c1", who).days for who in ("ann", "ben")}
    assert report == {"ann": ("seat-02", 8.0), "ben": ("seat-01", 10.0)}  # not seat-02's 10, seat-01's 10
    assert {who: round(sum(d.active_hours for d in days) * 60, 6) for who, days in pages.items()} == {
        "ann": 8.0,
        "ben": 10.0,
    }


def test_a_seat_removed_and_the_course_deleted_while_the_monitor_runs(url, tmp_path):
    """Readings go on: the removed seat's device and then every device are nobody's, nothing is refused."""
    now_minute = int(time.time()) // 60
    monitor, clock = _running_monitor(url, (now_minute - 10) * 60)
    try:
        _tick_at(monitor, clock, (now_minute - 3) * 60)
        with open_store(url) as store:
            store.seats.release("c1", seat="seat-03")
            store.lifecycle.remove_seats("c1", ["seat-03"], actor="test", force=True)
        assert _tick_at(monitor, clock, (now_minute - 2) * 60) == {"seat-01": "ann", "seat-02": None}
        with open_store(url) as store:
            store.lifecycle.delete_course("c1", export_to=tmp_path / "c1.zip", actor="test")
        assert _tick_at(monitor, clock, (now_minute - 1) * 60) == {}
        _tick_at(monitor, clock, now_minute * 60)
        assert monitor.write_failures == 0 and monitor.dropped == 0
    finally:
        monitor.close()
    with open_store(url) as store:
        rows = store.monitor.usage_rows()
    # the deleted course took its seats and people with it: its history is nobody's, no row is another's
    assert {(r.minute - now_minute, r.seat, r.participant) for r in rows} == {(m, None, None) for m in (-3, -2, -1)}


def test_a_seat_given_another_device_while_the_monitor_runs(url):
    """The layout re-carved: seat-01's device changes; readings of its old device are nobody's from then on."""
    now_minute = int(time.time()) // 60
    monitor, clock = _running_monitor(url, (now_minute - 10) * 60)
    gpu = [g.uuid for g in CAPTURE.gpus]
    try:
        _tick_at(monitor, clock, (now_minute - 2) * 60)
        assert isinstance(monitor.store, MonitorStore)
        monitor.store.import_seats([SeatEntry("seat-01", gpu[3], "ann"), SeatEntry("seat-03", gpu[2], "ben")])
        _tick_at(monitor, clock, (now_minute - 1) * 60)
        _tick_at(monitor, clock, now_minute * 60)
    finally:
        monitor.close()
    with open_store(url) as store:
        rows = store.monitor.usage_rows()
    credited = {(r.minute - now_minute, r.device_uuid): r.participant for r in rows if r.participant}
    assert credited == {
        (-2, gpu[0]): "ann",
        (-2, gpu[2]): "ben",
        (-1, gpu[3]): "ann",
        (-1, gpu[2]): "ben",
    }
