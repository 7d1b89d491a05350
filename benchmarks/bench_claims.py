"""Seat claims under contention, side by side: gpuseat's claim vs plain SQL on the same tables vs a one-table floor.

For each database (SQLite file, PostgreSQL schema), roster size (1,000 and 10,000 participants, seats for
90 % of them) and number of writer processes (16 and 64), every participant claims a seat once:

* ``gpuseat`` — :meth:`CourseStore.claim_seat` (``gpuseat.store.claims``: one statement on PostgreSQL,
  ``BEGIN IMMEDIATE`` + ``INSERT … SELECT … RETURNING`` on SQLite), with the events row and the seat view;
* ``plain`` — the same claim written by hand with the driver alone (sqlite3 / psycopg, no SQLAlchemy):
  the participant looked up, the best free suitable seat taken (same suitability and order), the events
  row written, ``FOR UPDATE SKIP LOCKED`` / ``BEGIN IMMEDIATE``. It uses what the schema offers gpuseat:
  a seat is free when ``NOT seats.taken`` (the flag the database triggers keep, served by the partial
  index ``ix_seats_free``), so its ``FOR UPDATE SKIP LOCKED`` also skips a seat taken since its snapshot;
  the best seat is the better of the best one reserved for the group and the best open one, each read
  in preference order from its partial index (``ix_seats_free_reserved``, ``ix_seats_free_order``,
  migration 0012) instead of sorting every free seat; the participant's open assignment is looked up
  with the id as a one-value subquery (an index lookup in PostgreSQL's generic plan too), as gpuseat does;
* ``floor`` — one table, one ``UPDATE … WHERE id = (SELECT … LIMIT 1 [FOR UPDATE SKIP LOCKED]) RETURNING``.

Every client is ready before the clock starts: connected, and its claim statement run once for a
participant who does not exist (so a process's first claim does not pay for opening connections and
the server's first planning of the statement: the timing is claims, not start-up).

Each cell (database, roster, writers) runs ``--rounds`` times (default 5), the three methods taking
turns, because one round is short: at 64 writers 1,000 claims take about a third of a second, and two
single rounds of the same cell differed up to tenfold (2026-12-03). Prints, per method, the median
round's claims/s with the slowest and fastest round, p50/p99 per claim over all rounds, seated / "no
free seat" answers, double assignments (must be 0) and the ratios gpuseat/plain and gpuseat/floor, plus
the load average (the machine may be shared).

Run: ``.venv/bin/python benchmarks/bench_claims.py [--pg URL] [--participants 1000,10000] [--writers 16,64]
[--rounds 5] [--hogs N]``
(``--hogs N``: N busy-loop processes run during every round, so more processes want the CPU than there
are cores, as on a shared machine; ``--pg`` defaults to ``GPUSEAT_TEST_PG_URL``; PostgreSQL is skipped without one).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, make_url, text

from gpuseat.core.roster import RosterText
from gpuseat.store import SeatSpec, open_store

COURSE_TOML = 'name = "bench"\nparticipants = {n}\n[schedule]\nstart = 2026-01-05\ndays = 5\n'
METHODS = ("gpuseat", "plain", "floor")
STATES = "('planned', 'requested', 'running')"
FREE = "NOT s.taken"  # the seat row's flag, kept by gpuseat's triggers on assignments (migration 0011)
DOUBLES = (
    "SELECT count(*) FROM (SELECT {c} FROM {t} WHERE {w} GROUP BY {c} HAVING count(*) > 1) d",
    [("seat_id", "assignments", "valid_to IS NULL"), ("participant_id", "assignments", "valid_to IS NULL")],
    [("holder", "floor_seats", "holder IS NOT NULL")],
)


def setup(url: str, tmp: Path, participants: int, seats: int) -> None:
    """A course with the roster and the seats (through the library), and the floor's one table."""
    path = tmp / "bench.toml"
    path.write_text(COURSE_TOML.format(n=participants))
    with open_store(url, create=True) as store:
        store.courses.create_course(path, key="bench")
        rows = ["name,email,unix_user"] + [f"P {i},p{i:05d}@example.org,p{i:05d}" for i in range(participants)]
        store.roster.import_roster("bench", RosterText("\n".join(rows), where="bench roster"))
        store.seats.add_seats("bench", [SeatSpec(key=f"s{i:05d}", kind="gpu", memory_gb=16) for i in range(seats)])
        serial = "INTEGER PRIMARY KEY" if url.startswith("sqlite") else "SERIAL PRIMARY KEY"
        with store.database.engine.begin() as conn:
            conn.execute(text(f"CREATE TABLE floor_seats (id {serial}, holder VARCHAR(128))"))
            conn.execute(text("INSERT INTO floor_seats (holder) VALUES " + ", ".join(["(NULL)"] * seats)))


def reset(url: str) -> int:
    """Every seat free again (between methods and writer counts); returns the claim events so far
    (the events log is append-only: it keeps every run's lines)."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM assignments"))
        conn.execute(text("UPDATE floor_seats SET holder = NULL"))
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))
    with engine.connect() as conn:
        logged = int(conn.execute(text("SELECT count(*) FROM events WHERE action = 'seat.claim'")).scalar() or 0)
    engine.dispose()
    return logged


# -- plain SQL and floor clients (the driver alone) ----------------------------------------------------

ISOLATION = (
    "(CASE s.kind WHEN 'gpu' THEN 2 WHEN 'vm' THEN 2 WHEN 'cloud' THEN 2 WHEN 'slurm' THEN 2 "
    "WHEN 'mig' THEN 1 WHEN 'vgpu' THEN 1 ELSE 0 END)"
)
FITS = (
    "(s.memory_gb IS NULL OR s.memory_gb >= {m}) AND " + ISOLATION + " >= {i}"
    " AND ({w} = 0 OR s.kind IN ('vm', 'vgpu', 'cloud') OR s.engine = 'libvirt')"
)
RANK = "(s.kind = 'cloud'), (s.memory_gb IS NULL), s.memory_gb, s.key{c}"
BETTER = "(b.kind = 'cloud'), b.r, (b.memory_gb IS NULL), b.memory_gb, b.key{c}"


def arms(cid: str, grp: str, fits: str, extra: str, collate: str, lock: str, reserved: str) -> tuple[str, str]:
    """The best free seat reserved for the group and the best free open seat, each from its partial index."""
    head = "SELECT s.id, s.key, s.kind, s.memory_gb, {r} AS r FROM seats s"
    where = f"s.course_id = {cid} AND NOT s.taken AND s.state IN {STATES} AND {fits}{extra}"
    tail = f"ORDER BY {RANK.format(c=collate)} LIMIT 1{lock}"
    return (
        f"{head.format(r=0)} WHERE {where} AND json_array_length(s.groups) > 0 AND {grp} IS NOT NULL AND {reserved} "
        + tail,
        f"{head.format(r=1)} WHERE {where} AND json_array_length(s.groups) = 0 {tail}",
    )


SQLITE_ARMS = arms(
    "?3", "?4", FITS.format(m="?5", i="?6", w="?7"), "", "", "",
    "EXISTS (SELECT 1 FROM json_each(s.groups) j WHERE j.value = ?4)",
)  # fmt: skip
PLAIN_SQLITE_TAKE = f"""
INSERT INTO assignments (seat_id, participant_id, valid_from, mode)
SELECT b.id, ?1, ?2, 'pool' FROM (SELECT * FROM ({SQLITE_ARMS[0]}) UNION ALL SELECT * FROM ({SQLITE_ARMS[1]})) b
ORDER BY {BETTER.format(c="")} LIMIT 1
RETURNING seat_id
"""

PLAIN_SQLITE_LOOKUP = (
    "SELECT p.id, p.group_name, a.seat_id FROM participants p LEFT JOIN assignments a "
    "ON a.participant_id = p.id AND a.valid_to IS NULL WHERE p.course_id = ? AND p.key = ?"
)

PG_ARMS = arms(
    "%(c)s", "(SELECT group_name FROM p)", FITS.format(m="%(m)s", i="0", w="0"),
    " AND EXISTS (SELECT 1 FROM p) AND NOT EXISTS (SELECT 1 FROM held)", ' COLLATE "C"', " FOR UPDATE OF s SKIP LOCKED",
    "EXISTS (SELECT 1 FROM json_array_elements_text(s.groups) j(v) WHERE j.v = (SELECT group_name FROM p))",
)  # fmt: skip
PLAIN_PG = f"""
WITH p AS (SELECT id, key, group_name FROM participants WHERE course_id = %(c)s AND key = %(k)s),
held AS (SELECT a.seat_id FROM assignments a WHERE a.participant_id = (SELECT id FROM p) AND a.valid_to IS NULL),
r AS ({PG_ARMS[0]}),
o AS ({PG_ARMS[1]}),
pick AS (SELECT b.id, b.key FROM (SELECT * FROM r UNION ALL SELECT * FROM o) b
         ORDER BY {BETTER.format(c=' COLLATE "C"')} LIMIT 1),
ins AS (INSERT INTO assignments (seat_id, participant_id, valid_from, mode)
        SELECT pick.id, p.id, %(t)s, 'pool' FROM pick, p RETURNING seat_id),
ev AS (INSERT INTO events (at, course_key, actor, action, participant, seat, detail)
       SELECT %(t)s, 'bench', 'bench', 'seat.claim', p.key, pick.key, '{{"mode": "pool"}}'::json FROM ins, pick, p)
SELECT (SELECT seat_id FROM held), (SELECT seat_id FROM ins)
"""


def _sqlite_conn(url: str) -> Any:
    import sqlite3

    conn = sqlite3.connect(make_url(url).database, timeout=60, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def _pg_conn(url: str) -> Any:
    import psycopg

    u = make_url(url)
    opts = dict(u.query)
    return psycopg.connect(
        dbname=u.database, user=u.username, host=opts.get("host"), options=opts.get("options"), autocommit=True
    )


def plain_client(url: str) -> Callable[[str], bool]:
    """A hand-written claim: True when seated, False on "no free seat"."""
    if url.startswith("sqlite"):
        conn = _sqlite_conn(url)
        cid = conn.execute("SELECT id FROM courses WHERE key = 'bench'").fetchone()[0]
        conn.execute(PLAIN_SQLITE_LOOKUP, (cid, "nobody")).fetchone()  # ready

        def claim_sqlite(key: str) -> bool:
            import sqlite3

            while True:
                pid, grp, held = conn.execute(PLAIN_SQLITE_LOOKUP, (cid, key)).fetchone()
                if held is not None:
                    return True
                now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    row = conn.execute(PLAIN_SQLITE_TAKE, (pid, now, cid, grp, 0.0, 0, 0)).fetchone()
                    if row is not None:
                        seat = conn.execute("SELECT key FROM seats WHERE id = ?", (row[0],)).fetchone()[0]
                        conn.execute(
                            "INSERT INTO events (at, course_key, actor, action, participant, seat, detail) "
                            "VALUES (?, 'bench', 'bench', 'seat.claim', ?, ?, '{\"mode\": \"pool\"}')",
                            (now, key, seat),
                        )
                    conn.execute("COMMIT")
                    return row is not None
                except sqlite3.IntegrityError:
                    conn.execute("ROLLBACK")

        return claim_sqlite
    import psycopg

    pg = _pg_conn(url)
    cid = pg.execute("SELECT id FROM courses WHERE key = 'bench'").fetchone()[0]
    pg.execute(PLAIN_PG, {"c": cid, "k": "nobody", "m": 0.0, "t": datetime.now(UTC)}).fetchone()  # ready

    def claim_pg(key: str) -> bool:
        while True:
            try:
                held, new = pg.execute(PLAIN_PG, {"c": cid, "k": key, "m": 0.0, "t": datetime.now(UTC)}).fetchone()
            except psycopg.errors.UniqueViolation:
                continue
            if held is not None or new is not None:
                return True
            free = pg.execute(
                f"SELECT count(*) FROM seats s WHERE s.course_id = %s AND s.state IN {STATES} AND {FREE}", (cid,)
            ).fetchone()[0]
            if not free:
                return False
            time.sleep(0.002)

    return claim_pg


def floor_client(url: str) -> Callable[[str], bool]:
    """The floor: one table, one UPDATE … RETURNING per claim."""
    if url.startswith("sqlite"):
        conn = _sqlite_conn(url)

        def floor_sqlite(key: str) -> bool:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(
                "UPDATE floor_seats SET holder = ? WHERE id = "
                "(SELECT id FROM floor_seats WHERE holder IS NULL ORDER BY id LIMIT 1) RETURNING id",
                (key,),
            ).fetchone()
            conn.execute("COMMIT")
            return row is not None

        return floor_sqlite
    pg = _pg_conn(url)

    def floor_pg(key: str) -> bool:
        row = pg.execute(
            "UPDATE floor_seats SET holder = %s WHERE id = (SELECT id FROM floor_seats WHERE holder IS NULL "
            "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id",
            (key,),
        ).fetchone()
        return row is not None

    return floor_pg


def gpuseat_client(url: str) -> Callable[[str], bool]:
    from gpuseat.errors import NoFreeSeat, NotFound

    store = open_store(url)
    with contextlib.suppress(NotFound):
        store.claims.claim_seat("bench", "nobody", mode="pool", actor="bench")  # ready

    def claim(key: str) -> bool:
        try:
            store.claims.claim_seat("bench", key, mode="pool", actor="bench")
            return True
        except NoFreeSeat:
            return False

    return claim


def worker(url: str, method: str, keys: list[str], start: Any, out: Any) -> None:
    """Claim a seat for each key; report per-claim latencies and outcomes."""
    client = {"gpuseat": gpuseat_client, "plain": plain_client, "floor": floor_client}[method](url)
    start.wait()
    lat: list[float] = []
    got = none = 0
    for key in keys:
        t0 = time.perf_counter()
        if client(key):
            got += 1
        else:
            none += 1
        lat.append(time.perf_counter() - t0)
    out.put((lat, got, none, time.perf_counter()))


def doubles(url: str, method: str, logged_before: int) -> int:
    q, course, floor = DOUBLES
    engine = create_engine(url)
    with engine.connect() as conn:
        n = sum(
            int(conn.execute(text(q.format(c=c, t=t, w=w))).scalar() or 0)
            for c, t, w in (floor if method == "floor" else course)
        )
        if method != "floor":  # every new assignment has its events row
            a = conn.execute(text("SELECT count(*) FROM assignments")).scalar()
            e = conn.execute(text("SELECT count(*) FROM events WHERE action = 'seat.claim'")).scalar()
            n += abs(int(a or 0) - (int(e or 0) - logged_before))
    engine.dispose()
    return n


def hog(stop: Any) -> None:
    """Busy CPU (``--hogs``): another program's work on the same cores."""
    n = 0
    while not stop.is_set():
        for _ in range(10_000):
            n += 1


def run(url: str, method: str, procs: int, participants: int, hogs: int = 0) -> dict[str, Any]:
    logged = reset(url)
    keys = [f"p{i:05d}" for i in range(participants)]
    ctx = mp.get_context("fork")
    start = ctx.Barrier(procs + 1)
    out = ctx.Queue()
    workers = [ctx.Process(target=worker, args=(url, method, keys[i::procs], start, out)) for i in range(procs)]
    for w in workers:
        w.start()
    stop = ctx.Event()
    busy = [ctx.Process(target=hog, args=(stop,), daemon=True) for _ in range(hogs)]
    for b in busy:
        b.start()
    try:
        start.wait()
        t0 = time.perf_counter()
        results = [out.get(timeout=1800) for _ in workers]
    finally:
        stop.set()
        for b in busy:
            b.join(timeout=5)
    for w in workers:
        w.join()
    wall = max(r[3] for r in results) - t0
    lat = [x for r in results for x in r[0]]
    return {
        "method": method,
        "claims_per_s": len(lat) / wall,
        "latencies": lat,
        "seated": sum(r[1] for r in results),
        "no_free_seat": sum(r[2] for r in results),
        "doubles": doubles(url, method, logged),
    }


def summary(method: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell from its rounds: the median round's claims/s (with the slowest and fastest round), p50/p99
    over every claim of every round, and the sums of the outcomes and doubles."""
    speeds = sorted(r["claims_per_s"] for r in runs)
    lat = sorted(x for r in runs for x in r["latencies"])
    return {
        "method": method,
        "rounds": len(runs),
        "claims_per_s": statistics.median(speeds),
        "claims_per_s_range": [speeds[0], speeds[-1]],
        "p50_ms": statistics.median(lat) * 1000,
        "p99_ms": lat[int(0.99 * (len(lat) - 1))] * 1000,
        "seated": sum(r["seated"] for r in runs) // len(runs),
        "no_free_seat": sum(r["no_free_seat"] for r in runs) // len(runs),
        "doubles": sum(r["doubles"] for r in runs),
    }


def pg_schema(base: str) -> tuple[str, Callable[[], None]]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in base else "?"

    def drop() -> None:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()

    return f"{base}{sep}options=-csearch_path%3D{schema}", drop


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--participants", default="1000,10000", help="Roster sizes, comma-separated.")
    parser.add_argument("--writers", default="16,64", help="Writer process counts, comma-separated.")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--pg", default=os.environ.get("GPUSEAT_TEST_PG_URL"))
    parser.add_argument("--databases", default="sqlite,postgresql", help="Which to run, comma-separated.")
    parser.add_argument(
        "--rounds", type=int, default=5, help="Runs of each cell, the methods taking turns (medians are printed)."
    )
    parser.add_argument(
        "--hogs",
        type=int,
        default=0,
        help="Busy-loop processes running during each round (more runnable processes than cores, as on a "
        "shared machine: the writer queue's convoy, issue 38 item 19).",
    )
    parser.add_argument("--json", type=Path, help="Also write every row to this JSON file.")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give 1 or more rounds per cell")
    methods = [m for m in args.methods.split(",") if m]
    print(f"load average at start: {load()} ({os.cpu_count()} CPUs, {args.hogs} busy-loop processes per round)")
    head = f"{'database':<11}{'people':>7}{'writers':>8} {'method':<8}{'claims/s':>9}{'p50 ms':>8}{'p99 ms':>8}"
    print(head + f"{'seated':>8}{'no seat':>8}{'doubles':>8}   claims/s of the slowest–fastest round")
    rows: list[dict[str, Any]] = []
    for db in args.databases.split(","):
        if db == "postgresql" and not args.pg:
            print("postgresql skipped: no --pg URL and no GPUSEAT_TEST_PG_URL")
            continue
        for participants in (int(x) for x in args.participants.split(",")):
            with tempfile.TemporaryDirectory() as tmp:
                drop: Callable[[], None] | None = None
                url = f"sqlite:///{Path(tmp) / 'claims.db'}"
                if db == "postgresql":
                    url, drop = pg_schema(args.pg)
                try:
                    setup(url, Path(tmp), participants, participants * 9 // 10)
                    for procs in (int(x) for x in args.writers.split(",")):
                        # the methods take turns, round after round, so a change in the machine's load
                        # weighs on all of them alike
                        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
                        for _ in range(args.rounds):
                            for method in methods:
                                runs[method].append(run(url, method, procs, participants, args.hogs))
                        group = {}
                        for method in methods:
                            r = summary(method, runs[method])
                            r.update(database=db, participants=participants, writers=procs, load=load())
                            rows.append(r)
                            group[method] = r
                            low, high = r["claims_per_s_range"]
                            print(
                                f"{db:<11}{participants:>7}{procs:>8} {method:<8}{r['claims_per_s']:>9.0f}"
                                f"{r['p50_ms']:>8.1f}{r['p99_ms']:>8.1f}{r['seated']:>8}{r['no_free_seat']:>8}"
                                f"{r['doubles']:>8}   {low:.0f}–{high:.0f}",
                                flush=True,
                            )
                        print(ratios(group), flush=True)
                finally:
                    if drop:
                        drop()
    print(f"load average at end: {load()}")
    bad = sum(r["doubles"] for r in rows)
    print(f"double assignments (or claims without their events row), all runs: {bad}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def ratios(group: dict[str, dict[str, Any]]) -> str:
    g = group.get("gpuseat")
    parts = []
    for other in ("plain", "floor"):
        o = group.get(other)
        if g and o:
            p99 = g["p99_ms"] / o["p99_ms"]
            speed = g["claims_per_s"] / o["claims_per_s"]
            parts.append(f"gpuseat/{other}: p99 {p99:.2f}×, throughput {speed:.2f}×")
    return "    " + "; ".join(parts) if parts else ""


if __name__ == "__main__":
    main()
