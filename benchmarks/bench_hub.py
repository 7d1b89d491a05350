"""50 users start servers at once on a real JupyterHub with 50 pool seats: gpuseat's hooks vs the same hub
without them (the "keep track yourself" baseline of dockerspawner#331).

Prints, for each: request→ready p50/p99 (client side: ``POST /users/{u}/server`` until the server model
is ready), and for gpuseat: the time spent inside its ``pre_spawn_hook`` (p50/p99 of the store work on
gpuseat's thread, from the hub's log) and how long a hook waited behind the burst's other claims,
and double assignments (seats held by more than one running server, from the processes' environments
and from the store; must be 0). Servers are the tiny single-user server of tests/jupyterhub (a full
jupyter_server spends seconds of CPU importing, which is not what is measured here).

``--one-at-a-time`` starts the servers one after another instead: the hook's own time on a hub that is
otherwise idle (the goal of issue 21: p99 under 10 ms), not its queueing behind a burst.

Run: ``.venv/bin/python benchmarks/bench_hub.py [--users 50] [--one-at-a-time] [--db postgresql+psycopg://…]``
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
import uuid as uuidlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpuseat.core.roster import RosterText

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "jupyterhub"))

from realhub import RealHub, environ_of, running_hub  # noqa: E402

from gpuseat.jupyterhub.config import HubSettings, render  # noqa: E402
from gpuseat.store import open_store  # noqa: E402

HOOK_LINE = re.compile(r"gpuseat: (\S+)/ gets seat (\S+) \(\S+\) in ([0-9.]+) ms \(([0-9.]+) ms queued\)")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def make_store(url: str, tmp: Path, users: list[str]) -> None:
    store = open_store(url, create=True)
    course = tmp / "bench.toml"
    course.write_text(
        f'name = "Hub benchmark"\nparticipants = {len(users)}\n[needs]\nmin_gpu_memory_gb = 8\n'
        'isolation = "partitioned"\n[schedule]\nstart = 2026-09-07\ndays = 5\n',
        encoding="utf-8",
    )
    store.courses.create_course(course, key="bench")
    roster = "name,email,group,unix_user\n" + "".join(f"{u},{u}@example.edu,participants,{u}\n" for u in users)
    store.roster.import_roster("bench", RosterText(roster, where="bench-roster.csv"))
    store.seats.add_seats(
        "bench",
        [
            {
                "key": f"mig-{i:02d}",
                "kind": "mig",
                "host": "gpu-node-1",
                "profile": "1g.10gb",
                "memory_gb": 10.0,
                "device_uuid": f"MIG-{uuidlib.UUID(int=i + 1)}",
            }
            for i in range(len(users))
        ],
    )
    store.close()


def storm(hub: RealHub, users: list[str], at_once: int) -> tuple[list[float], dict[str, dict]]:
    """``at_once`` users ask at a time (all of them: a burst; 1: one after another, an otherwise idle
    hub); returns request→ready seconds and the ready servers."""

    def one(user: str) -> float:
        t0 = time.perf_counter()
        r = hub.start(user)
        if r.status_code not in (201, 202):
            raise RuntimeError(f"{user}: {r.status_code} {r.text}")
        if r.status_code == 202:
            hub.wait_ready(user, timeout=600)
        return time.perf_counter() - t0

    with ThreadPoolExecutor(at_once) as pool:
        times = list(pool.map(one, users))
    return times, hub.servers()


def stop_all(hub: RealHub, users: list[str]) -> None:
    # a few threads: 200 threads on one httpx client failed now and then with "Bad file descriptor"
    # (2 of 5 runs of --users 200 on 2026-12-04), after the measurement, while stopping the servers
    with ThreadPoolExecutor(min(len(users), 8)) as pool:
        list(pool.map(hub.stop_server, users))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--db", default=None, help="database URL (default: a fresh SQLite file)")
    ap.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="start the servers one after another (the hook's own time on an idle hub) instead of all at once",
    )
    args = ap.parse_args()
    if args.users < 1:
        ap.error(f"--users {args.users}: give 1 or more users")
    at_once = 1 if args.one_at_a_time else args.users
    users = [f"u{i:03d}" for i in range(args.users)]
    env_path = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory(prefix="bench-hub-") as tmp_name:
        tmp = Path(tmp_name)
        url = args.db or f"sqlite:///{tmp / 'course.db'}"
        make_store(url, tmp, users)

        results = {}
        for label, config in (
            ("plain hub (no seats)", "c = get_config()\nc.Spawner.consecutive_failure_limit = 0\n"),
            ("gpuseat hooks", render(HubSettings(course="bench", db_url=url, mode="pool", cull_idle_hours=0))),
        ):
            workdir = tmp / label.split()[0]
            with running_hub(config, workdir, env={"PYTHONPATH": env_path}, tiny=True, timeout=300) as hub:
                hub.add_users(*users)
                times, servers = storm(hub, users, at_once)
                doubles = -1
                hook_ms: list[float] = []
                queued_ms: list[float] = []
                if "gpuseat" in label:
                    seats = Counter(environ_of(s["state"]["pid"])["GPUSEAT_SEAT"] for s in servers.values())
                    store = open_store(url)
                    held = Counter(s.key for s in store.seats.seats("bench") if s.participant is not None)
                    store.close()
                    doubles = sum(n - 1 for n in seats.values() if n > 1) + sum(n - 1 for n in held.values() if n > 1)
                    assert len(seats) == len(users), f"{len(seats)} of {len(users)} servers hold a seat"
                    lines = list(HOOK_LINE.finditer(hub.log_tail(10_000_000)))
                    hook_ms = [float(m.group(3)) for m in lines]
                    queued_ms = [float(m.group(4)) for m in lines]
                stop_all(hub, users)
            results[label] = (times, hook_ms, queued_ms, doubles, len(servers))

    how = "one after another" if args.one_at_a_time else "at once"
    print(f"{args.users} users {how}, {args.users} pool seats, db {'PostgreSQL' if args.db else 'SQLite'}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        "| hub | ready servers | request→ready p50 | p99 | inside gpuseat's hook p50 | p99 "
        "| hook queued (burst) p99 | double assignments |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, (times, hook_ms, queued_ms, doubles, ready) in results.items():
        hook = (
            (f"{statistics.median(hook_ms):.1f} ms", f"{pct(hook_ms, 0.99):.1f} ms", f"{pct(queued_ms, 0.99):.0f} ms")
            if hook_ms
            else ("—", "—", "—")
        )
        print(
            f"| {label} | {ready} | {statistics.median(times):.2f} s | {pct(times, 0.99):.2f} s "
            f"| {hook[0]} | {hook[1]} | {hook[2]} | {doubles if doubles >= 0 else '—'} |"
        )
    base, ours = (r[0] for r in results.values())
    print(f"ratio gpuseat/plain: p50 {statistics.median(ours) / statistics.median(base):.2f}×, "
          f"p99 {pct(ours, 0.99) / pct(base, 0.99):.2f}×")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
