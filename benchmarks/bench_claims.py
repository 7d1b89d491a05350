"""Seat claims under contention: 1,000 participants claiming seats from 16 processes at once.

Side by side on one SQLite file and on PostgreSQL:

* ``gpuseat`` — :meth:`CourseStore.claim_seat` (``BEGIN IMMEDIATE`` / ``FOR UPDATE SKIP LOCKED``);
* ``naive`` — what a spawner hook does without a store: read the first free seat, then insert the
  assignment, no lock. The partial unique indexes refuse its double assignments; each refusal is
  counted as a *conflict* (a double assignment on a database without those indexes).

Prints claims/s, p50/p99 latency per claim, seats handed out, "no free seat" answers, conflicts, and
the double assignments the database holds afterwards (must be 0).

Run: ``.venv/bin/python benchmarks/bench_claims.py [--pg URL] [--participants 1000] [--seats 900]``
(``--pg`` defaults to ``GPUSEAT_TEST_PG_URL``; PostgreSQL is skipped without one).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from gpuseat.core.roster import RosterText
from gpuseat.services.courses import SeatSpec, open_store

COURSE_TOML = 'name = "bench"\nparticipants = {n}\n[schedule]\nstart = 2026-01-05\ndays = 5\n'


def setup(url: str, tmp: Path, participants: int, seats: int) -> None:
    """A course with the roster and the seats, in a fresh database."""
    path = tmp / "bench.toml"
    path.write_text(COURSE_TOML.format(n=participants))
    with open_store(url, create=True) as store:
        store.create_course(path, key="bench")
        rows = ["name,email,unix_user"] + [f"P {i},p{i:05d}@example.org,p{i:05d}" for i in range(participants)]
        store.import_roster("bench", RosterText("\n".join(rows)))
        store.add_seats("bench", [SeatSpec(key=f"s{i:05d}", kind="gpu", memory_gb=16) for i in range(seats)])


def _naive_claim(engine: Any, course_id: int, key: str) -> str | None:
    """Read a free seat, then take it: no lock between the two (the race the store closes)."""
    with engine.begin() as conn:
        pid = conn.execute(
            text("SELECT id FROM participants WHERE course_id = :c AND key = :k"), {"c": course_id, "k": key}
        ).scalar()
        seat = conn.execute(
            text(
                "SELECT s.id, s.key FROM seats s WHERE s.course_id = :c AND NOT EXISTS "
                "(SELECT 1 FROM assignments a WHERE a.seat_id = s.id AND a.valid_to IS NULL) ORDER BY s.key LIMIT 1"
            ),
            {"c": course_id},
        ).first()
        if seat is None:
            return None
        conn.execute(
            text("INSERT INTO assignments (seat_id, participant_id, valid_from, mode) VALUES (:s, :p, :t, 'pool')"),
            {"s": seat[0], "p": pid, "t": datetime.now(UTC)},
        )
        return str(seat[1])


def worker(url: str, method: str, keys: list[str], start: Any, out: Any) -> None:
    """Claim a seat for each key; report per-claim latencies and outcomes."""
    from sqlalchemy.exc import IntegrityError, OperationalError

    from gpuseat.errors import NoFreeSeat

    store = open_store(url)
    course_id = None
    if method == "naive":
        with store._engine.connect() as conn:
            course_id = conn.execute(text("SELECT id FROM courses WHERE key = 'bench'")).scalar()
    start.wait()
    lat: list[float] = []
    got = none = conflicts = 0
    for key in keys:
        t0 = time.perf_counter()
        try:
            if method == "gpuseat":
                store.claim_seat("bench", key, mode="pool")
                got += 1
            elif _naive_claim(store._engine, int(course_id or 0), key) is None:
                none += 1
            else:
                got += 1
        except NoFreeSeat:
            none += 1
        except (IntegrityError, OperationalError):  # a double assignment refused, or SQLite busy
            conflicts += 1
        lat.append(time.perf_counter() - t0)
    store.close()
    out.put((lat, got, none, conflicts, time.perf_counter()))


def doubles(url: str) -> int:
    engine = create_engine(url)
    q = "SELECT count(*) FROM (SELECT {c} FROM assignments WHERE valid_to IS NULL GROUP BY {c} HAVING count(*) > 1) d"
    with engine.connect() as conn:
        n = sum(int(conn.execute(text(q.format(c=c))).scalar() or 0) for c in ("seat_id", "participant_id"))
    engine.dispose()
    return n


def run(url: str, method: str, procs: int, participants: int, seats: int, tmp: Path) -> dict[str, Any]:
    setup(url, tmp, participants, seats)
    keys = [f"p{i:05d}" for i in range(participants)]
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(procs + 1)
    out = ctx.Queue()
    workers = [ctx.Process(target=worker, args=(url, method, keys[i::procs], start, out)) for i in range(procs)]
    for w in workers:
        w.start()
    start.wait()
    t0 = time.perf_counter()
    results = [out.get(timeout=600) for _ in workers]
    for w in workers:
        w.join()
    wall = max(r[4] for r in results) - t0
    lat = sorted(x for r in results for x in r[0])
    return {
        "method": method,
        "claims_per_s": len(lat) / wall,
        "p50_ms": statistics.median(lat) * 1000,
        "p99_ms": lat[int(0.99 * (len(lat) - 1))] * 1000,
        "seated": sum(r[1] for r in results),
        "no_free_seat": sum(r[2] for r in results),
        "conflicts": sum(r[3] for r in results),
        "doubles": doubles(url),
    }


def pg_schema(base: str) -> tuple[str, Any]:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--participants", type=int, default=1000)
    parser.add_argument("--seats", type=int, default=900)
    parser.add_argument("--procs", type=int, default=16)
    parser.add_argument("--pg", default=os.environ.get("GPUSEAT_TEST_PG_URL"))
    parser.add_argument("--databases", default="sqlite,postgresql", help="Which to run, comma-separated.")
    args = parser.parse_args()
    print(f"{args.participants} participants, {args.seats} seats, {args.procs} processes")
    print(
        f"{'database':<11}{'method':<9}{'claims/s':>9}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'seated':>8}{'no seat':>8}{'conflicts':>10}{'doubles':>8}"
    )
    rows = []
    for db in args.databases.split(","):
        if db == "postgresql" and not args.pg:
            print("postgresql skipped: no --pg URL and no GPUSEAT_TEST_PG_URL")
            continue
        for method in ("gpuseat", "naive"):
            with tempfile.TemporaryDirectory() as tmp:
                drop = None
                url = f"sqlite:///{Path(tmp) / 'claims.db'}"
                if db == "postgresql":
                    url, drop = pg_schema(args.pg)
                try:
                    r = run(url, method, args.procs, args.participants, args.seats, Path(tmp))
                finally:
                    if drop:
                        drop()
            rows.append((db, r))
            print(
                f"{db:<11}{method:<9}{r['claims_per_s']:>9.0f}{r['p50_ms']:>8.1f}{r['p99_ms']:>8.1f}"
                f"{r['seated']:>8}{r['no_free_seat']:>8}{r['conflicts']:>10}{r['doubles']:>8}"
            )
    for db in ("sqlite", "postgresql"):
        pair = {r["method"]: r for d, r in rows if d == db}
        if len(pair) == 2:
            ratio = pair["gpuseat"]["claims_per_s"] / pair["naive"]["claims_per_s"]
            print(
                f"{db}: gpuseat seats {pair['gpuseat']['seated']} of {args.seats} with 0 conflicts at "
                f"{ratio:.2f}× the naive throughput; naive lost {pair['naive']['conflicts']} claims to conflicts"
            )


if __name__ == "__main__":
    main()
