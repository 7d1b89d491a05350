"""One monitor tick of a 448-seat course (64 GPUs × 7 MIG instances on 8 DGX-class hosts' worth of GPUs,
1,000 processes with their users; attribution + alerts + Prometheus collector + SQLite store), also the
smaller 8 × 7 × 100 lab, vs spawning a process that parses a recorded ``nvidia-smi -q -x`` capture (what
a cron-driven nvidia-smi scraper pays per sample); and the database size of a simulated 15-day,
16-seat course at the default interval with downsampling. Prints medians and 95th percentiles.

Run: ``.venv/bin/python benchmarks/bench_monitor.py`` (``--no-course`` skips the 15-day simulation)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from gpuseat.db.store import Store
from gpuseat.monitor.alerts import AlertTracker
from gpuseat.monitor.attribution import SeatEntry, SeatMap
from gpuseat.monitor.prometheus import SeatCollector
from gpuseat.monitor.replay import ReplaySampler, synthetic_snapshot
from gpuseat.monitor.runner import Monitor, observe

CAPTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gpuseat__tesla-m60-x2.xml"
INTERVAL_S = 5  # gpuseat monitor's default --interval


def lab(gpus: int, migs: int, processes: int, n: int) -> list:
    """``n`` snapshots 5 s apart; every process knows its user (as a remote ``ps`` gives it), 1 in 50 foreign."""
    base = synthetic_snapshot(gpus=gpus, migs_per_gpu=migs, processes=processes, taken_at=1_700_000_040.0)
    owner = {m.uuid: f"p{i:03d}" for i, m in enumerate(m for g in base.gpus for m in g.mig)}
    procs = tuple(
        replace(p, user="stranger" if k % 50 == 0 else owner[p.mig_uuid]) for k, p in enumerate(base.processes)
    )
    return [replace(base, processes=procs, taken_at=base.taken_at + 5 * i) for i in range(n)]


def bench_tick(tmp: Path, gpus: int, migs: int, processes: int, n: int) -> tuple[float, float]:
    """Median and 95th percentile (ms) of one tick: attribution, alerts, collector and the store."""
    snaps = lab(gpus, migs, processes, n)
    entries = [
        SeatEntry(f"s{i:03d}", m.uuid, f"p{i:03d}") for i, m in enumerate(m for g in snaps[0].gpus for m in g.mig)
    ]
    store = Store(f"sqlite:///{tmp / f'tick{gpus}.db'}")
    store.import_seats(entries)
    mon = Monitor(
        ReplaySampler(snaps, loop=False),
        store.seat_map(),
        store=store,
        alerts=AlertTracker(),
        collector=SeatCollector(),
    )
    times = []
    for _ in range(n):
        t = time.perf_counter()
        tick = mon.tick()
        times.append(time.perf_counter() - t)
        assert tick.stored
    mon.close()
    store_ms = statistics.median(mon.store_seconds) * 1000 if getattr(mon, "store_seconds", None) else float("nan")
    print(f"  ({gpus} GPUs) of which the database write: median {store_ms:.2f} ms")
    times.sort()
    return statistics.median(times) * 1000, times[int(len(times) * 0.95)] * 1000


def bench_spawn(n: int = 20) -> float:
    code = "import sys; from gpuseat.nvsmi import parse_xml;parse_xml(open(sys.argv[1]).read(), host='x')"
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
        small, small95 = bench_tick(tmp, 8, 7, 100, 300)
        big, big95 = bench_tick(tmp, 64, 7, 1000, 200)
        spawn_ms = bench_spawn()
        print(f"tick, 8 GPUs x 7 MIG, 100 processes (56 seats):      median {small:.2f} ms, p95 {small95:.2f} ms")
        print(f"tick, 64 GPUs x 7 MIG, 1,000 processes (448 seats):  median {big:.2f} ms, p95 {big95:.2f} ms")
        print(f"spawn a process that parses a recorded nvidia-smi -q -x: median {spawn_ms:.1f} ms")
        print(f"ratio spawn/tick (448 seats): {spawn_ms / big:.0f}x   (goal: 448-seat tick < 5 ms)")
        if "--no-course" in sys.argv:
            return
        mb, counts, elapsed = course_db_mb(tmp)
        print(
            f"15-day, 16-seat course at {INTERVAL_S} s: {mb:.1f} MB on disk "
            f"({counts['minute_aggregates']} minute rows, {counts['samples']} raw rows kept; "
            f"written in {elapsed:.0f} s)   (goal: < 50 MB)"
        )


if __name__ == "__main__":
    main()
