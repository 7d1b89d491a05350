"""One monitor tick (replayed 8 GPUs × 7 MIG, 100 processes; attribution + SQLite store) vs
spawning a process that parses a recorded ``nvidia-smi -q -x`` capture; and the database size of a
simulated 15-day, 16-seat course at the default interval with downsampling.

Run: ``.venv/bin/python benchmarks/bench_monitor.py``
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuseat.db.store import Store
from gpuseat.monitor.alerts import AlertTracker
from gpuseat.monitor.attribution import SeatEntry, SeatMap
from gpuseat.monitor.replay import ReplaySampler, synthetic_snapshot
from gpuseat.monitor.runner import Monitor, observe

CAPTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gpuseat__tesla-m60-x2.xml"
INTERVAL_S = 5  # gpuseat monitor's default --interval


def bench_tick(tmp: Path, n: int = 300) -> float:
    snaps = [
        synthetic_snapshot(gpus=8, migs_per_gpu=7, processes=100, taken_at=1_700_000_040.0 + 5 * i)
        for i in range(n)
    ]
    seats = SeatMap(
        [
            SeatEntry(f"s{i:02d}", m.uuid, f"p{i:02d}")
            for i, m in enumerate(m for g in snaps[0].gpus for m in g.mig)
        ]
    )
    store = Store(f"sqlite:///{tmp / 'tick.db'}")
    store.import_seats(seats.entries)
    mon = Monitor(ReplaySampler(snaps, loop=False), store.seat_map(), store=store, alerts=AlertTracker())
    times = []
    for _ in range(n):
        t = time.perf_counter()
        mon.tick()
        times.append(time.perf_counter() - t)
    mon.close()
    return statistics.median(times) * 1000


def bench_spawn(n: int = 20) -> float:
    code = (
        "import sys; from gpuseat.monitor.nvidia_smi import parse_xml;"
        "parse_xml(open(sys.argv[1]).read(), host='x')"
    )
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code, str(CAPTURE)], check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def course_db_mb(tmp: Path, days: int = 15, seats: int = 16) -> tuple[float, dict[str, int], float]:
    """Write a whole course straight through the store (one whole-GPU seat per participant)."""
    snap0 = synthetic_snapshot(gpus=seats, migs_per_gpu=0, processes=seats // 2, taken_at=0.0)
    seat_map = SeatMap([SeatEntry(f"s{i:02d}", g.uuid, f"p{i:02d}") for i, g in enumerate(snap0.gpus)])
    path = tmp / "course.db"
    store = Store(f"sqlite:///{path}")
    store.import_seats(seat_map.entries)
    seat_map = store.seat_map()
    _, states = observe(snap0, seat_map, users={})
    start, ticks = 1_700_000_040, days * 86400 // INTERVAL_S
    t = time.perf_counter()
    for i in range(ticks):
        store.write("lab", start + i * INTERVAL_S, states)
    elapsed = time.perf_counter() - t
    counts = store.counts()
    with store.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    size = sum(p.stat().st_size for p in tmp.glob("course.db*"))
    return size / 1e6, counts, elapsed


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        tick_ms = bench_tick(tmp)
        spawn_ms = bench_spawn()
        print(
            f"tick (8 GPUs x 7 MIG, 100 processes, attribution + alerts + SQLite store): median {tick_ms:.2f} ms"
        )
        print(
            f"spawn a process that parses a recorded nvidia-smi -q -x capture:          median {spawn_ms:.1f} ms"
        )
        print(f"ratio spawn/tick: {spawn_ms / tick_ms:.0f}x   (goal: tick < 5 ms)")
        mb, counts, elapsed = course_db_mb(tmp)
        print(
            f"15-day, 16-seat course at {INTERVAL_S} s: {mb:.1f} MB on disk "
            f"({counts['minute_aggregates']} minute rows, {counts['samples']} raw rows kept; "
            f"written in {elapsed:.0f} s)   (goal: < 50 MB)"
        )


if __name__ == "__main__":
    main()
