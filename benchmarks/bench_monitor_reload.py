"""How often a monitor of one course re-reads its seats while other courses of the same store are written.

One store holds ``--courses`` courses of ``--seats`` seats each, every seat assigned. Two monitors of course
``c00`` tick side by side in one loop (one process, alternating): one with today's rule (re-read when that
course's events or its seats' assignments moved) and one with the rule before it (re-read when the newest
events row or assignment of the whole store moved). Meanwhile another process writes other courses only: a
move back and forth in course ``c01`` and ``seat.check`` lines of the other courses, ``--writes`` a second
(a registration rush, another course's agent). Every ``--interval`` each monitor ticks: it asks the store
for the seat map if it changed (``seats_if_changed``, as ``gpuseat monitor``'s tick does) and stores one
sample a seat (``write``, whose ``refresh`` re-reads the seats and their holders when they changed). Prints,
per rule, the re-reads a minute (seat maps, and ``_load_seat_ids`` calls) and the tick's p50/p95.

Run: ``.venv/bin/python benchmarks/bench_monitor_reload.py`` (``--db URL`` for a PostgreSQL database;
``--seconds``, ``--writes``, ``--interval``, ``--courses``, ``--seats``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from gpuseat.core.roster import RosterText
from gpuseat.db.models import Assignment, Event
from gpuseat.monitor.replay import synthetic_snapshot
from gpuseat.readings import LeafReading, SeatEntry, leaves
from gpuseat.store import open_monitor, open_store
from gpuseat.store.monitor import MonitorStore

COURSE_FILE = Path(__file__).resolve().parents[1] / "examples" / "course-2016.toml"


class WholeStoreRule(MonitorStore):
    """The rule before: the seats are read again when the newest events row or assignment of the whole store
    moved, whichever course it belongs to."""

    def _changes(self, conn: Connection) -> tuple[int | None, int | None]:
        row = conn.execute(select(select(func.max(Event.id)).scalar_subquery(), func.max(Assignment.id))).one()
        return row[0], row[1]


class Counted:
    """A monitor store of one rule whose re-reads of the seats are counted."""

    def __init__(self, store: MonitorStore) -> None:
        self.store = store
        self.loads = 0  # holders re-read (``_load_seat_ids``: the writer's refresh)
        self.maps = 0  # seat maps re-read (``seats_if_changed``: the tick's)
        load = store._load_seat_ids

        def counted() -> None:
            self.loads += 1
            load()

        store._load_seat_ids = counted  # type: ignore[method-assign]


def build(url: str, courses: int, seats: int) -> None:
    """``courses`` courses ``c00``… of ``seats`` seats each (device ``GPU-cNN-sMMM``), every seat assigned."""
    roster = "name,email,unix_user,key\n" + "".join(f"P{i},p{i}@example.org,p{i:04d},p{i:04d}\n" for i in range(seats))
    text = COURSE_FILE.read_text(encoding="utf-8").replace("\nparticipants = 16\n", f"\nparticipants = {seats}\n")
    with tempfile.TemporaryDirectory() as tmp, open_store(url, create=True) as store:
        course_file = Path(tmp) / "course.toml"
        course_file.write_text(text, encoding="utf-8")
        for c in range(courses):
            key = f"c{c:02d}"
            store.courses.create_course(course_file, key=key)
            store.roster.import_roster(key, RosterText(roster, where=f"{key}.csv"))
            rows = [
                {"key": f"s{i:03d}", "kind": "gpu", "host": "gpu1", "device_uuid": f"GPU-{key}-s{i:03d}"}
                for i in range(seats)
            ]
            store.seats.add_seats(key, rows)
            store.seats.assign_all(key)
            store.seats.release(key, seat="s000")  # a free seat for the writer's moves


def write_others(url: str, courses: int, per_second: float, until: float) -> None:
    """Other courses' writes until ``until``: one in ten a move in ``c01`` (to the free seat and back), the
    rest ``seat.check`` lines of the other courses in turn."""
    with open_store(url) as store:
        n = 0
        gap = 1 / per_second
        nxt = time.monotonic()
        while time.monotonic() < until:
            if n % 10 == 0:
                store.seats.move("c01", "p0001", "s000" if (n // 10) % 2 == 0 else "s001")
            else:
                course = f"c{1 + n % (courses - 1):02d}"
                store.events.log(course, "seat.check", seat="s002", actor="bench")
            n += 1
            nxt += gap
            time.sleep(max(0.0, nxt - time.monotonic()))


def readings(seats: int, course: str) -> list[LeafReading]:
    """One reading per seat's device (a synthetic snapshot's GPUs renamed to the seats' devices)."""
    from dataclasses import replace

    snap = synthetic_snapshot(gpus=seats, migs_per_gpu=0, processes=0, taken_at=0.0)
    gpus = tuple(replace(g, uuid=f"GPU-{course}-s{i:03d}") for i, g in enumerate(snap.gpus))
    snap = replace(snap, gpus=gpus)
    entries = [SeatEntry(f"s{i:03d}", f"GPU-{course}-s{i:03d}", None) for i in range(seats)]
    return [LeafReading(leaf, entry, ()) for leaf, entry in zip(leaves(snap), entries, strict=True)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="database URL (default: a fresh SQLite file)")
    ap.add_argument("--seconds", type=float, default=60.0, help="how long the writer writes (default 60)")
    ap.add_argument("--writes", type=float, default=20.0, help="other courses' writes a second (default 20)")
    ap.add_argument("--courses", type=int, default=20, help="courses in the store (default 20)")
    ap.add_argument("--seats", type=int, default=100, help="seats per course (default 100)")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between ticks (default 0.5)")
    args = ap.parse_args()
    if args.courses < 2:
        ap.error("--courses must be at least 2: the writer writes the other courses")
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'reload.db'}"
        t = time.perf_counter()
        build(url, args.courses, args.seats)
        print(
            f"{args.courses} courses × {args.seats} seats built in {time.perf_counter() - t:.1f} s",
            f"({url.split(':')[0]})",
        )
        rules = {
            "course's own (now)": Counted(open_monitor(url, course="c00")),
            "whole store (before)": Counted(WholeStoreRule(open_store(url), course="c00")),
        }
        for c in rules.values():
            c.store.seats_if_changed()  # the first seat map
            c.loads = 0
        ticks: dict[str, list[float]] = {name: [] for name in rules}
        until = time.monotonic() + args.seconds
        writer = multiprocessing.get_context("spawn").Process(
            target=write_others, args=(url, args.courses, args.writes, until)
        )
        writer.start()
        at = 1_700_000_000.0
        rows = readings(args.seats, "c00")  # the same readings every tick: only the tick's second changes
        order = list(rules.items())
        started = nxt = time.monotonic()
        while time.monotonic() < until:
            order.reverse()  # each rule ticks first every other time
            for name, c in order:
                host = f"bench-{name.split()[0]}"
                t = time.perf_counter()
                if c.store.seats_if_changed() is not None:
                    c.maps += 1
                c.store.write(host, at, rows)
                ticks[name].append(time.perf_counter() - t)
            at += 1
            nxt += args.interval
            time.sleep(max(0.0, nxt - time.monotonic()))
        elapsed = time.monotonic() - started
        writer.join()
        print(
            f"{len(ticks[next(iter(rules))])} ticks of each rule in {elapsed:.0f} s,",
            f"other courses written {args.writes:g}/s",
        )
        for name, c in rules.items():
            q = statistics.quantiles(ticks[name], n=100, method="inclusive")
            print(
                f"  {name:22s} re-reads a minute: seats and holders {c.loads / elapsed * 60:6.1f}, "
                f"seat map {c.maps / elapsed * 60:6.1f}   "
                f"tick p50 {q[49] * 1000:6.2f} ms  p95 {q[94] * 1000:6.2f} ms"
            )
            c.store.close()


if __name__ == "__main__":
    main()
