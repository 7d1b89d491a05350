"""The policy evaluation of issue 40 against the floor of one SQL aggregate over the same samples.

24 courses, 2,000 seats (each held), one day of one-minute monitor rollups per seat (2.88 M rows in
``minute_aggregates``), some seat requests and top-ups. The evaluation is what the agent reads for every
course in a pass: each participant's seat hours (quota, top-ups, running time against access hours and
sessions), each seat's run state, and each seat's GPU readings over the day (``gpu_window``: count, peak
utilisation, first reading), course by course through the store. The floor is one ``GROUP BY seat_id``
over the day's rollups of every seat in one query, read into Python. Also printed: what an agent's pass
reads (the same, with the GPU window of the idle rule, 30 + 10 minutes, instead of the day).

    .venv/bin/python benchmarks/bench_policy.py [--seats 2000] [--courses 24] [--runs 5] [--db URL]
    sudo .venv/bin/python benchmarks/bench_policy.py --requests 40     # part 2 (root: a real sshd)

Prints the median of each, and the ratio. Part 2 (``--requests N``): on bench_apply's stand-in host with a
real sshd and ``gpuseat agent`` as its own process (SQLite, 1 s poll), ann's seat is stopped and started N
times by request rows; each timed from the request until it is marked done and until ssh as ann is refused
(stop) or let in (start); the floor runs the same pass in-process right after each request.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]

COURSE = """name = "course {n}"
participants = {count}
[needs]
min_gpu_memory_gb = 16
[schedule]
start = {start}
days = 21
hours = "14:00-17:00"
access = "08:00-22:00"
[policy]
quota_hours = 40
idle_minutes = 30
"""


def build(url: str, seats: int, courses: int, folder: Path) -> datetime:
    """The courses, rosters, held seats, requests, top-ups and a day of rollups; returns "now"."""
    from sqlalchemy import create_engine, select

    from gpuseat.db.models import Device, Seat
    from gpuseat.store import open_store

    now = datetime.now(UTC).replace(second=0, microsecond=0)
    start = (now - timedelta(days=7)).date()
    per = [seats // courses + (1 if i < seats % courses else 0) for i in range(courses)]
    with open_store(url, create=True) as store:
        for c, count in enumerate(per):
            key = f"c{c:02d}"
            (folder / f"{key}.toml").write_text(COURSE.format(n=c, count=count, start=start))
            store.courses.create_course(folder / f"{key}.toml", key=key)
            lines = ["name,email"] + [f"p{c}-{i},p{c}-{i}@example.org" for i in range(count)]
            (folder / f"{key}.csv").write_text("\n".join(lines) + "\n")
            store.roster.import_roster(key, folder / f"{key}.csv")
            store.seats.add_seats(
                key,
                [
                    {
                        "key": f"s{i:03d}",
                        "kind": "mig",
                        "host": f"h{c}",
                        "engine": "host",
                        "device_uuid": f"MIG-{c}-{i}",
                    }
                    for i in range(count)
                ],
            )
            store.seats.assign_all(key)
            people = [p.key for p in store.roster.participants(key)]
            for who in people[::10]:
                r = store.requests.request_seat(key, who, "stop", actor="bench", by_participant=False)
                store.requests.finish_request(key, r.id, ok=True, reason="bench")
                store.requests.add_seat_hours(key, who, 5, actor="bench")
    engine = create_engine(url)
    minute0 = int((now - timedelta(days=1)).timestamp()) // 60
    with engine.begin() as conn:
        rows = list(conn.execute(select(Seat.id, Seat.device_uuid, Seat.host)))
        conn.execute(Device.__table__.insert(), [{"host": h, "uuid": u, "name": "H200"} for _i, u, h in rows])
        dev = {u: d for d, u in conn.execute(select(Device.id, Device.uuid))}
        raw = conn.connection.dbapi_connection
        assert raw is not None
        cur = raw.cursor()
        mark = "?" if engine.dialect.name == "sqlite" else "%s"
        sql = (
            "INSERT INTO minute_aggregates (minute, device_id, seat_id, participant_id, samples, active_samples, "
            f"memory_max_mib, memory_avg_mib, utilization_avg) VALUES ({', '.join([mark] * 9)})"
        )
        for seat_id, uuid, _h in rows:
            d = dev[uuid]
            cur.executemany(
                sql, [(minute0 + m, d, seat_id, None, 6, 3, 1000, 500, (seat_id * 7 + m) % 100) for m in range(1440)]
            )
    engine.dispose()
    return now


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seats", type=int, default=2000)
    ap.add_argument("--courses", type=int, default=24)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--db", default=None, help="an empty database URL (default: a SQLite file in a temp folder)")
    args = ap.parse_args()
    from sqlalchemy import create_engine, text

    from gpuseat.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'policy.db'}"
        t = time.perf_counter()
        now = build(url, args.seats, args.courses, Path(tmp))
        print(
            f"built {args.seats} seats in {args.courses} courses, a day of rollups, in {time.perf_counter() - t:.1f} s"
        )
        since = now - timedelta(days=1)
        engine = create_engine(url)
        floor_sql = text(
            "SELECT seat_id, count(*), max(utilization_avg), min(minute) FROM minute_aggregates "
            "WHERE minute >= :m GROUP BY seat_id"
        )
        floors, evals, agent = [], [], []
        with open_store(url) as store:
            keys = [c.key for c in store.courses.list_courses()]
            for _ in range(args.runs):
                t = time.perf_counter()
                with engine.connect() as conn:
                    got = conn.execute(floor_sql, {"m": int(since.timestamp()) // 60}).all()
                floors.append(time.perf_counter() - t)
                assert len(got) == args.seats
                t = time.perf_counter()
                seen = 0
                for key in keys:
                    hours = store.requests.seat_hours(key, now=now)
                    store.requests.run_states(key)
                    seen += len(store.requests.gpu_window(key, since))
                    assert all(h.quota is not None for h in hours.values())
                evals.append(time.perf_counter() - t)
                assert seen == args.seats
                t = time.perf_counter()
                for key in keys:  # what an agent's pass reads: the idle window (30 + 10 min), not the day
                    store.requests.seat_hours(key, now=now)
                    store.requests.run_states(key)
                    store.requests.gpu_window(key, now - timedelta(minutes=40))
                agent.append(time.perf_counter() - t)
        engine.dispose()
    floor, ev = statistics.median(floors), statistics.median(evals)
    print(f"floor (one SQL aggregate over the day's rollups): {floor * 1000:.0f} ms")
    print(f"policy evaluation (hours, run states, GPU window; {len(keys)} courses): {ev * 1000:.0f} ms")
    print(f"ratio {ev / floor:.2f}x (goal <= 2x and < 1 s)")
    print(f"an agent's pass (hours, run states, the 40 min idle window): {statistics.median(agent) * 1000:.0f} ms")


def requests_part(n: int) -> None:
    """Part 2: a stop/start request to "done" and to what ann sees, agent vs an in-process pass."""
    import os
    import subprocess

    from bench_apply import pct, setup_lab
    from gpuseat.engines.apply import one_pass
    from gpuseat.engines.runner import Runner
    from gpuseat.store import open_store

    tmp = Path(tempfile.mkdtemp(prefix="bench-policy-"))
    env = {**os.environ, "GPUSEAT_DATA_DIR": str(tmp / "data"), "PYTHONPATH": str(ROOT / "src")}
    os.environ["GPUSEAT_DATA_DIR"] = env["GPUSEAT_DATA_DIR"]
    db = f"sqlite:///{tmp / 'c.db'}"
    lab, _seats = setup_lab(db, env, tmp)

    def run(store: Any, after: Any = None) -> tuple[list[float], list[float]]:
        done_s, real_s = [], []
        for i in range(n):
            action = "stop" if i % 2 == 0 else "start"
            t0 = time.monotonic()
            r = store.requests.request_seat("bench", "ann", action, actor="bench", by_participant=False)
            if after is not None:
                after()
            done = real = None
            while done is None or real is None:
                if time.monotonic() - t0 > 60:
                    raise RuntimeError(f"request {r.id} ({action}) took over 60 s")
                latest = store.requests.seat_requests("bench", participant="ann", limit=1)[0]
                if done is None and latest.state != "pending":
                    done = time.monotonic() - t0
                if real is None and (lab.ssh("ann", "true").returncode == 0) == (action == "start"):
                    real = time.monotonic() - t0
            done_s.append(done)
            real_s.append(real)
        return done_s, real_s

    try:
        with open_store(db) as store:
            floor = run(store, lambda: one_pass(store, course="bench", runner=Runner()))
            log = (tmp / "agent.log").open("w")
            agent = subprocess.Popen(
                [sys.executable, "-m", "gpuseat", "agent", "--engine", "host", "--host", "gpu1", "--db", db],
                stdout=log, stderr=log, env=env,
            )  # fmt: skip
            try:
                time.sleep(3)
                by_agent = run(store)
            finally:
                agent.terminate()
                agent.wait(30)
    finally:
        lab.close()
    for name, (done_s, real_s) in (("floor: one pass in-process", floor), ("agent (SQLite, 1 s poll)", by_agent)):
        print(
            f"{name}: to done p50 {pct(done_s, 0.5):.2f} s, p99 {pct(done_s, 0.99):.2f} s; "
            f"to ann's side p50 {pct(real_s, 0.5):.2f} s, p99 {pct(real_s, 0.99):.2f} s (n={len(done_s)})"
        )


if __name__ == "__main__":
    if "--requests" in sys.argv:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        requests_part(int(sys.argv[sys.argv.index("--requests") + 1]))
    else:
        main()
