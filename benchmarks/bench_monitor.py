"""One monitor tick of a 448-seat course (64 GPUs × 7 MIG instances on 8 DGX-class hosts' worth of GPUs,
1,000 processes with their users; attribution + alerts + Prometheus collector + SQLite store), also the
smaller 8 × 7 × 100 lab; the database size of a simulated 15-day, 16-seat course at the default interval
with downsampling. Prints medians and 50th/95th/99th percentiles.

Side by side in the same run:
- ``gpuseat monitor``'s tick (``background=True``: the tick queues its rows for the writer thread, which
  writes while the monitor waits for the next interval; the benchmark waits for it, untimed, between
  ticks as the 5 s interval would) and the writer's sustained throughput (ticks queued back to back);
- the same tick writing the database itself (``background=False``, the path before the writer thread);
- a per-stage breakdown of the tick (``time.perf_counter`` around each stage);
- spawning a process that parses a recorded ``nvidia-smi -q -x`` capture (what a cron-driven
  nvidia-smi scraper pays per sample).

Run: ``.venv/bin/python benchmarks/bench_monitor.py`` (``--no-course`` skips the 15-day simulation;
``--db URL`` stores into that database instead of a fresh SQLite file, e.g. a PostgreSQL database)
"""

from __future__ import annotations

import gc
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from gpuseat.db import make_engine
from gpuseat.monitor.alerts import AlertTracker
from gpuseat.monitor.prometheus import SeatCollector
from gpuseat.monitor.replay import ReplaySampler, synthetic_snapshot
from gpuseat.monitor.runner import Monitor, observe
from gpuseat.readings import SeatEntry, SeatMap, leaves
from gpuseat.store import open_monitor
from gpuseat.store.monitor import MonitorStore

CAPTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gpuseat__tesla-m60-x2.xml"
INTERVAL_S = 5  # gpuseat monitor's default --interval


def lab(gpus: int, migs: int, processes: int, n: int, start: float = 1_700_000_040.0) -> list:
    """``n`` snapshots 5 s apart; every process knows its user (as a remote ``ps`` gives it), 1 in 50 foreign."""
    base = synthetic_snapshot(gpus=gpus, migs_per_gpu=migs, processes=processes, taken_at=start)
    owner = {m.uuid: f"p{i:03d}" for i, m in enumerate(m for g in base.gpus for m in g.mig)}
    procs = tuple(
        replace(p, user="stranger" if k % 50 == 0 else owner[p.mig_uuid]) for k, p in enumerate(base.processes)
    )
    return [replace(base, processes=procs, taken_at=base.taken_at + 5 * i) for i in range(n)]


def percentiles(seconds: list[float]) -> str:
    """``p50 … p95 … p99 …`` in ms."""
    q = statistics.quantiles(seconds, n=100, method="inclusive")
    return f"p50 {q[49] * 1000:6.2f} ms  p95 {q[94] * 1000:6.2f} ms  p99 {q[98] * 1000:6.2f} ms"


def _monitor(url: str, snaps: list, *, background: bool) -> tuple[Monitor, MonitorStore]:
    entries = [
        SeatEntry(f"s{i:03d}", m.uuid, f"p{i:03d}") for i, m in enumerate(m for g in snaps[0].gpus for m in g.mig)
    ]
    store = open_monitor(url)
    store.import_seats(entries)
    mon = Monitor(
        ReplaySampler(snaps, loop=False),
        store.seat_map(),
        store=store,
        alerts=AlertTracker(),
        collector=SeatCollector(),
        background=background,
    )
    return mon, store


def bench_tick(url: str, snaps: list, *, background: bool) -> tuple[list[float], list[float], list[float]]:
    """Seconds of each tick (wall clock, and CPU time of the ticking thread: on a shared, oversubscribed
    machine the wall clock also counts the time other processes had the core), and of each database
    flush (in the tick, or in the writer thread)."""
    mon, _ = _monitor(url, snaps, background=background)
    times, cpu = [], []
    for _ in snaps:
        t, c = time.perf_counter(), time.thread_time()
        tick = mon.tick()
        cpu.append(time.thread_time() - c)
        times.append(time.perf_counter() - t)
        if background:
            assert mon.wait_written(60), "the writer thread did not keep up"  # untimed: the interval's sleep
        else:
            assert tick.stored
    assert not mon.pending and mon.samples_stored == len(snaps)
    mon.close()
    return times, cpu, list(mon.store_seconds)


def bench_writer(url: str, snaps: list) -> tuple[float, float]:
    """Ticks queued back to back, then drained: (samples written a second, ticks a second)."""
    mon, _ = _monitor(url, snaps, background=True)
    t = time.perf_counter()
    for _ in snaps:
        mon.tick()
    assert mon.wait_written(600)
    elapsed = time.perf_counter() - t
    assert mon.samples_stored == len(snaps) and mon.write_failures == 0
    mon.close()
    rows = len(snaps) * len(leaves(snaps[0]))  # one sample per leaf device and tick
    return rows / elapsed, len(snaps) / elapsed


def bench_stages(url: str, snaps: list) -> dict[str, list[float]]:
    """The tick's stages one by one, the store written in line."""
    mon, store = _monitor(url, snaps, background=False)
    tracker, collector = AlertTracker(), SeatCollector()
    stages: dict[str, list[float]] = {k: [] for k in ("sample", "attribution", "alerts", "collector", "store")}
    sampler = ReplaySampler(snaps, loop=False)
    for _ in snaps:
        t0 = time.perf_counter()
        snap = sampler.sample()
        t1 = time.perf_counter()
        _, states = observe(snap, mon.seats)
        t2 = time.perf_counter()
        tracker.update(snap, states)
        t3 = time.perf_counter()
        collector.update(snap, states)
        t4 = time.perf_counter()
        store.write(snap.host, snap.taken_at, states)
        t5 = time.perf_counter()
        for k, a, b in zip(stages, (t0, t1, t2, t3, t4), (t1, t2, t3, t4, t5), strict=True):
            stages[k].append(b - a)
    mon.close()
    return stages


def report(label: str, tmp: Path, url: str | None, gpus: int, migs: int, processes: int, n: int) -> float:
    """Print one lab's figures; returns the background tick's median (ms)."""
    fresh = iter(range(1000))

    def db() -> str:  # a fresh database per measurement, or the given one (its samples are skipped when seen)
        return url or f"sqlite:///{tmp / f'tick{gpus}-{next(fresh)}.db'}"

    shift = iter(range(0, 10**9, 10**6))

    def snaps() -> list:  # new seconds for every measurement, so a shared database stores every sample
        made = lab(gpus, migs, processes, n, start=1_700_000_040.0 + next(shift))
        # A running monitor holds one snapshot, not hundreds made in advance: keep the cyclic garbage
        # collector from rescanning these (a full collection over them cost up to 90 ms of a tick).
        gc.collect()
        gc.freeze()
        return made

    bg, bg_cpu, bg_writes = bench_tick(db(), snaps(), background=True)
    fg, fg_cpu, fg_writes = bench_tick(db(), snaps(), background=False)
    rows_s, ticks_s = bench_writer(db(), snaps())
    stages = bench_stages(db(), snaps())
    print(f"{label}, median of {n}:")
    print(f"  tick, store in the writer thread (gpuseat monitor): {percentiles(bg)}")
    print(f"    CPU time of the tick:                             {percentiles(bg_cpu)}")
    print(f"    the writer's flush per tick:                      {percentiles(bg_writes)}")
    print(f"    writer sustained: {rows_s:,.0f} samples/s = {ticks_s:,.0f} ticks/s queued back to back")
    print(f"  tick, store written in the tick (before):           {percentiles(fg)}")
    print(f"    CPU time of the tick:                             {percentiles(fg_cpu)}")
    print(f"    of which the database write:                      {percentiles(fg_writes)}")
    print("  stages (median): " + ", ".join(f"{k} {statistics.median(v) * 1000:.2f} ms" for k, v in stages.items()))
    return statistics.median(bg) * 1000


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
    store = open_monitor(f"sqlite:///{path}")
    store.import_seats(seat_map.entries)
    seat_map = store.seat_map()
    _, states = observe(snap0, seat_map, users={})
    start, ticks = 1_700_000_040, days * 86400 // INTERVAL_S
    t = time.perf_counter()
    for i in range(ticks):
        store.write("lab", start + i * INTERVAL_S, states)
    elapsed = time.perf_counter() - t
    counts = store.counts()
    with make_engine(f"sqlite:///{path}").connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    size = sum(p.stat().st_size for p in tmp.glob("course.db*"))
    return size / 1e6, counts, elapsed


def main() -> None:
    logging.getLogger("gpuseat.monitor").setLevel(logging.ERROR)  # the lab's foreign-process alerts
    url = sys.argv[sys.argv.index("--db") + 1] if "--db" in sys.argv else None
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print(f"database: {url or 'a fresh SQLite file per measurement'}")
        report("8 GPUs x 7 MIG, 100 processes (56 seats)", tmp, url, 8, 7, 100, 300)
        big = report("64 GPUs x 7 MIG, 1,000 processes (448 seats)", tmp, url, 64, 7, 1000, 200)
        spawn_ms = bench_spawn()
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
