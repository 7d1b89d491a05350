"""How fast a change in the store reaches the machines: ``gpuseat agent`` against the floor of running the
same engine steps directly in one process.

Part 1, hand-over (root: a stand-in GPU host with a real sshd and real Unix users, tests/delivery/hostlab):
ann moves between two MIG seats N times, by ``gpuseat seats move`` (CLI, its own process) and by the
portal's seats form (a real ``gpuseat serve``). Each hand-over is timed from the move until, logged in
as ann, her old seat's device file is refused (EACCES) and her environment names the new seat. The
agent runs with its default poll (1 s, SQLite) or is woken by NOTIFY (PostgreSQL). The floor is the same
move and check with ``gpuseat apply``'s pass run directly in this process right after the move.

Part 2, a semester (PostgreSQL): 20 courses, 2,000 participants, 8 agents (each its own process and
lease, one "host" each) on a dry engine that records its steps in a file instead of changing a machine:
the time of a full resync of every agent, and the time from a single ``move`` to the agent's record.

    sudo .venv/bin/python benchmarks/bench_apply.py --moves 50 [--pg URL] [--semester]

Prints p50/p99 per variant and the ratio and difference against the floor.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from delivery.hostlab import MIG_AND_WHOLE, Lab, free_port, new_lab  # noqa: E402

MIG = [m["uuid"] for m in MIG_AND_WHOLE[0]["mig"]]  # type: ignore[index]
COURSE = 'name = "bench"\nparticipants = 4\n[needs]\nmin_gpu_memory_gb = 16\nisolation = "partitioned"\n' \
    "[schedule]\nstart = 2026-09-07\ndays = 5\n"  # fmt: skip
PROBE = (
    "python3 -c \"import os,sys\ntry: os.close(os.open(sys.argv[1], os.O_RDONLY)); print('OPEN')\n"
    "except OSError as e: print(__import__('errno').errorcode[e.errno])\" {old}; echo CUDA=$CUDA_VISIBLE_DEVICES"
)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def gpuseat(*args: str, db: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "gpuseat", *args, "--db", db], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"gpuseat {' '.join(args)}: {done.stderr}")
    return done.stdout


def setup_lab(db: str, env: dict[str, str], tmp: Path) -> tuple[Lab, dict[str, str]]:
    lab = new_lab()
    lab.build(MIG_AND_WHOLE)
    for who in ("ann", "ben"):
        lab.person(who)
    (tmp / "c.toml").write_text(COURSE)
    (tmp / "r.csv").write_text(lab.roster())
    (tmp / "l.txt").write_text(subprocess.run([str(lab.nvidia_smi), "-L"], capture_output=True, text=True).stdout)
    lab.port = free_port()
    gpuseat("course", "create", str(tmp / "c.toml"), "--key", "bench", db=db, env=env)
    gpuseat("roster", "import", str(tmp / "r.csv"), db=db, env=env)
    gpuseat(
        "seats", "add", "--from-nvidia-smi", str(tmp / "l.txt"), "--engine", "host", "--host", "gpu1", db=db, env=env
    )
    gpuseat("engines", "settings", "host", *[f"{k}={v}" for k, v in lab.settings().items()], db=db, env=env)
    seats = {s["device_uuid"]: s["key"] for s in json.loads(gpuseat("seats", "export", "-f", "json", db=db, env=env))}
    gpuseat("seats", "assign", "--participant", "ann", "--seat", seats[MIG[0]], db=db, env=env)
    gpuseat("apply", db=db, env=env)
    lab.start_sshd()
    return lab, seats


def arrived(lab: Lab, old: str, new_uuid: str) -> bool:
    done = lab.ssh("ann", PROBE.format(old=old))
    return "EACCES" in done.stdout and f"CUDA={new_uuid}" in done.stdout


COMMITTED: dict[int, list[float]] = {}  # id(result list) -> seconds from the move's commit to "real"


def handovers(lab: Lab, seats: dict[str, str], n: int, move: Any, after: Any = None) -> list[float]:
    """Move ann back and forth between MIG 0 and MIG 2 ``n`` times; seconds from the move's start until
    each is real (and, in COMMITTED, from the moment the move was stored)."""
    out: list[float] = []
    since_commit: list[float] = []
    for i in range(n):
        src, dst = (MIG[0], MIG[2]) if i % 2 == 0 else (MIG[2], MIG[0])
        old = str(lab.cap_file(0, 7 if src == MIG[0] else 9))
        t0 = time.monotonic()
        move(seats[dst])
        t1 = time.monotonic()
        if after is not None:
            after()
        while not arrived(lab, old, dst):
            if time.monotonic() - t0 > 60:
                raise RuntimeError("a hand-over took over 60 s")
            time.sleep(0.05)
        out.append(time.monotonic() - t0)
        since_commit.append(time.monotonic() - t1)
    COMMITTED[id(out)] = since_commit
    return out


def portal_mover(db: str, env: dict[str, str], tmp: Path) -> tuple[Any, Any]:
    import httpx

    from portal.live import csrf_of, login, start

    subprocess.run([sys.executable, "-m", "gpuseat", "admin", "set-password", "--password-stdin", "--db", db],
                   input="bench-password-1234\n", text=True, env=env, check=True, capture_output=True)  # fmt: skip
    server = start(["--db", db, "--course", "bench"], tmp / "serve.log", env=env)
    client = httpx.Client(timeout=30)
    login(client, server.url, "bench-password-1234")

    def move(seat: str) -> None:
        page = client.get(server.url + "/seats")
        r = client.post(
            server.url + "/seats/action",
            data={"csrf": csrf_of(page.text), "action": "move", "participant": "ann", "seat": seat},
        )
        if r.status_code != 200:
            raise RuntimeError(r.text[:300])

    return move, server


def part1(moves: int, pg: str | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for kind in ("sqlite", "postgresql") if pg else ("sqlite",):
        tmp = Path(tempfile.mkdtemp(prefix="bench-apply-"))
        env = {**os.environ, "GPUSEAT_DATA_DIR": str(tmp / "data"), "PYTHONPATH": str(ROOT / "src")}
        db = f"sqlite:///{tmp / 'c.db'}" if kind == "sqlite" else _pg_schema(pg or "")
        lab, seats = setup_lab(db, env, tmp)
        try:
            from gpuseat.engines.apply import one_pass
            from gpuseat.engines.runner import Runner
            from gpuseat.store import open_store

            os.environ["GPUSEAT_DATA_DIR"] = env["GPUSEAT_DATA_DIR"]
            with open_store(db) as store:
                floor = handovers(
                    lab, seats, moves,
                    lambda seat: store.seats.move("bench", "ann", seat, actor="bench"),
                    lambda: one_pass(store, course="bench", runner=Runner()),
                )  # fmt: skip
            log = (tmp / "agent.log").open("w")
            agent = subprocess.Popen(
                [sys.executable, "-m", "gpuseat", "agent", "--engine", "host", "--host", "gpu1", "--db", db],
                stdout=log, stderr=log, env=env,
            )  # fmt: skip
            try:
                time.sleep(3)
                cli = handovers(lab, seats, moves, lambda seat: gpuseat("seats", "move", "--participant", "ann",
                                                                        "--seat", seat, db=db, env=env))  # noqa: B023  # fmt: skip
                move, server = portal_mover(db, env, tmp)
                try:
                    web = handovers(lab, seats, moves, move)
                finally:
                    server.stop()
            finally:
                agent.terminate()
                agent.wait(30)
        finally:
            lab.close()
        for name, xs in (("floor: one pass in-process", floor), ("agent, seats move (CLI)", cli),
                         ("agent, portal move", web)):  # fmt: skip
            after = COMMITTED[id(xs)]
            rows.append({"db": kind, "variant": name, "n": len(xs), "p50_s": pct(xs, 0.5), "p99_s": pct(xs, 0.99),
                         "p99_after_commit_s": pct(after, 0.99)})  # fmt: skip
        for r in rows[-2:]:
            r["ratio_p99"] = r["p99_s"] / rows[-3]["p99_s"]
            r["minus_floor_p99_s"] = r["p99_s"] - rows[-3]["p99_s"]
            r["minus_floor_p99_after_commit_s"] = r["p99_after_commit_s"] - rows[-3]["p99_after_commit_s"]
    return rows


def _pg_schema(pg: str) -> str:
    import uuid

    from sqlalchemy import create_engine, text

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with create_engine(pg).begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in pg else "?"
    return f"{pg}{sep}options=-csearch_path%3D{schema}"


# -- part 2: a semester on a dry engine -----------------------------------------------------------------

DRY = Path(tempfile.gettempdir()) / "gpuseat-bench-dry"


def _register_dry() -> None:
    from gpuseat.engines import registry

    registry.specs()["dry"] = registry.EngineSpec(
        "dry", ("gpu", "mig"), f"{__name__}:DryEngine", "gpuseat.engines.host.engine:HostSettings", "records steps"
    )


def _dry_engine() -> type:
    from gpuseat.engines.base import Changes, CourseState, Holding, StepEngine

    class DryEngine(StepEngine):
        """Plans like a real engine (store against the machine's record) and records each step in a file."""

        name = "dry"

        def __init__(self, store: Any, course: str, *, settings: Any, runner: Any, host: str | None) -> None:
            self.store, self.course, self.runner, self.host = store, course, runner, host
            self.path = DRY / f"{host}.json"

        def _record(self) -> dict[str, str]:
            try:
                return dict(json.loads(self.path.read_text()))
            except (FileNotFoundError, ValueError):
                return {}

        def plan(self, course: CourseState) -> Changes:
            have = self._record()
            want = {f"{self.course}/{p.key}": s.key for s, p in course.holders() if s.host == self.host}
            mine = {k: v for k, v in have.items() if k.startswith(f"{self.course}/")}
            ch = Changes("dry", self.course, self.host)
            for who in sorted(set(mine) - set(want)):
                ch.steps.append(self._step("key.remove", who, "released", "revoke", None))
            for who, seat in sorted(want.items()):
                if mine.get(who) != seat:
                    ch.steps.append(self._step("key.set", who, f"holds {seat}", "grant", seat))
            return ch

        def _step(self, action: str, who: str, why: str, phase: Any, seat: str | None) -> Any:
            from gpuseat.engines.base import Step

            return Step("dry", action, who, why, phase, None, (seat,) if seat else (), self.host, {"seat": seat})

        def do(self, step: Any) -> None:
            have = self._record()
            if step.action == "key.remove":
                have.pop(step.target, None)
            else:
                have[step.target] = step.data["seat"]
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(have))
            os.replace(tmp, self.path)

        def observe(self, course: CourseState) -> list[Holding]:
            return [Holding("dry", "key", k, k.split("/", 1)[1], v, self.host)
                    for k, v in self._record().items() if k.startswith(f"{self.course}/")]  # fmt: skip

        def check(self, seats: Any) -> list[Any]:
            return []

        def connect(self, seat: Any) -> None:
            return None

        def probe(self, seat: Any, participant: Any) -> Any:
            raise NotImplementedError

    return DryEngine


def _agent_main(db: str, host: str, stop: Any, passes: Any) -> None:
    _register_dry()
    from gpuseat.engines.agent import Agent, AgentOptions
    from gpuseat.store import open_store

    with open_store(db) as store:
        agent = Agent(store, AgentOptions(engine="dry", host=host, poll_s=1.0, resync_s=3600), say=lambda _l: None)
        halt = threading.Event()
        threading.Thread(target=lambda: (stop.wait(), halt.set()), daemon=True).start()
        while not halt.is_set():
            t0 = time.monotonic()
            result = agent.tick()
            if result is not None:
                passes.put((host, time.monotonic() - t0, sum(len(r.done) for r in result.reports)))
            agent.wait(1.0, halt)


def part2(pg: str, changes: int) -> list[dict[str, Any]]:
    import shutil

    shutil.rmtree(DRY, ignore_errors=True)
    DRY.mkdir()
    _register_dry()
    from gpuseat.store import SeatSpec, open_store

    db = _pg_schema(pg)
    tmp = Path(tempfile.mkdtemp(prefix="bench-semester-"))
    hosts = [f"h{i}" for i in range(8)]
    with open_store(db, create=True) as store:
        for c in range(20):
            key = f"c{c:02d}"
            (tmp / f"{key}.toml").write_text(COURSE.replace("participants = 4", "participants = 100"))
            store.courses.create_course(tmp / f"{key}.toml", key=key)
            (tmp / f"{key}.csv").write_text(
                "key,name,email\n" + "".join(f"p{i:03d},P {i},p{i:03d}.{key}@example.org\n" for i in range(100))
            )
            store.roster.import_roster(key, tmp / f"{key}.csv")
            specs = [SeatSpec(key=f"s{i:03d}", kind="gpu", host=hosts[(c * 100 + i) % 8], engine="dry",
                              memory_gb=80, state="running") for i in range(110)]  # fmt: skip
            store.seats.add_seats(key, specs)
            store.seats.assign_all(key)
    ctx = mp.get_context("fork")
    stop, passes = ctx.Event(), ctx.Queue()
    t0 = time.monotonic()
    procs = [ctx.Process(target=_agent_main, args=(db, h, stop, passes)) for h in hosts]
    for p in procs:
        p.start()
    first: dict[str, float] = {}
    while len(first) < len(hosts):
        host, _secs, done = passes.get(timeout=600)
        if done and host not in first:
            first[host] = time.monotonic() - t0
    full = max(first.values())
    lat = []
    with open_store(db) as store:
        for i in range(changes):
            course, who = f"c{i % 20:02d}", f"p{i % 100:03d}"
            free = next(s for s in store.seats.seats(course) if not s.participant)
            t = time.monotonic()
            store.seats.move(course, who, free.key, actor="bench")
            path = DRY / f"{free.host}.json"
            while json.loads(path.read_text()).get(f"{course}/{who}") != free.key:
                if time.monotonic() - t > 60:
                    raise RuntimeError("a change took over 60 s")
                time.sleep(0.01)
            lat.append(time.monotonic() - t)
    stop.set()
    for p in procs:
        p.join(30)
    return [
        {"db": "postgresql", "variant": "semester: first full pass, 8 agents, 2,000 seats", "s": round(full, 2)},
        {
            "db": "postgresql",
            "variant": "semester: one change applied",
            "n": len(lat),
            "p50_s": pct(lat, 0.5),
            "p99_s": pct(lat, 0.99),
        },
    ]


DryEngine: Any = None


def main() -> None:
    global DryEngine
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moves", type=int, default=50)
    ap.add_argument("--pg", default=os.environ.get("GPUSEAT_TEST_PG_URL"), help="a PostgreSQL URL (its own schema)")
    ap.add_argument("--semester", action="store_true", help="also run part 2 (needs --pg)")
    ap.add_argument("--changes", type=int, default=50, help="single changes timed in part 2")
    ap.add_argument("--skip-handover", action="store_true")
    args = ap.parse_args()
    if args.moves < 1 or args.changes < 1:
        ap.error("--moves and --changes must be at least 1")
    DryEngine = _dry_engine()
    rows = [] if args.skip_handover else part1(args.moves, args.pg)
    if args.semester:
        if not args.pg:
            ap.error("--semester needs --pg URL (or GPUSEAT_TEST_PG_URL)")
        rows += part2(args.pg, args.changes)
    for r in rows:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}))
    print(f"load average at the end: {os.getloadavg()[0]:.2f}; median of medians "
          f"{statistics.median([r.get('p50_s', r.get('s', 0)) for r in rows]):.3f} s")  # fmt: skip


if __name__ == "__main__":
    main()
