"""The organizer's Seats page at 100 and 1,000 seats, and a participant's page under a held write lock,
each side by side with its floor (issue 38, items 20 and 9).

For each size a fresh SQLite store gets a course of N participants and N seats, every seat held and
with connect details; the real app (in-process, Starlette's test client: no network) renders:

* ``GET /seats`` logged in: median time and SQL statements per page (a SQLAlchemy event listener);
* floor 1, plain SQL: the one ``SELECT`` of the same seat rows (seat, holder, access) with ``sqlite3``;
* floor 2, a participant's page ``GET /t/<token>``: the per-seat cost of the Seats page (page / N)
  must be a small fraction of it.

Then a participant's first visit while a second process holds SQLite's write lock (``BEGIN
IMMEDIATE``) against the same page with no lock held (the floor): the page must not wait for the lock.

    .venv/bin/python benchmarks/bench_seats_page.py              # 100 and 1,000 seats, 15 pages each
    .venv/bin/python benchmarks/bench_seats_page.py --repeat 5   # quicker on a busy machine
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import event  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402

from gpuseat.catalog.bundle import load_catalog  # noqa: E402
from gpuseat.core.roster import RosterText  # noqa: E402
from gpuseat.store import CourseStore, open_store  # noqa: E402
from gpuseat.store.accounts import Accounts  # noqa: E402
from gpuseat.web.app import Portal, create_app  # noqa: E402

PASSWORD = "a long enough passphrase"
CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')
COURSE = """name = "Seats at scale"
participants = {n}

[needs]
min_gpu_memory_gb = 4
cuda = true
guest_os = "linux"
isolation = "partitioned"

[schedule]
start = 2026-06-01
days = 5
"""
HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""
SERVE_FLAGS = ("--links-expire", "never", "--port")
PLAIN_SQL = """
SELECT s.key, s.kind, s.engine, s.state, s.profile, s.memory_gb, s.connect, s.access, s.readiness, p.key
FROM seats s JOIN courses c ON c.id = s.course_id
LEFT JOIN assignments a ON a.seat_id = s.id AND a.valid_to IS NULL
LEFT JOIN participants p ON p.id = a.participant_id
WHERE c.key = 'scale' ORDER BY s.key
"""


def build(folder: Path, n: int) -> tuple[str, CourseStore, list[str]]:
    """A store with a course of ``n`` participants and ``n`` held seats with connect details; its tokens."""
    url = f"sqlite:///{folder / 'seats.db'}"
    store = open_store(url, create=True)
    path = folder / "scale.toml"
    path.write_text(COURSE.format(n=n), encoding="utf-8")
    store.courses.create_course(path, key="scale")
    rows = "\n".join(f"P{i:04d},p{i:04d}@example.edu,participants,p{i:04d}," for i in range(n))
    store.roster.import_roster(
        "scale", RosterText("name,email,group,unix_user,ssh_key\n" + rows + "\n", where="roster")
    )
    seats = [
        {
            "key": f"seat-{i:04d}",
            "kind": "gpu",
            "host": f"gpu{i // 8}.example.org",
            "device_uuid": f"GPU-{i:08d}-0000-0000-0000-000000000000",
            "profile": "L40S",
            "memory_gb": 48.0,
            "connect": f"ssh p{i:04d}@gpu{i // 8}.example.org",
        }
        for i in range(n)
    ]
    store.seats.add_seats("scale", seats)
    store.seats.assign_all("scale")
    tokens = [t.token for t in store.tokens.issue_tokens("scale")]
    Accounts(store).set_password("admin", PASSWORD)
    return url, store, tokens


def timed(fn, repeat: int) -> float:
    """Median seconds of ``repeat`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def statements(fn) -> int:
    seen: list[str] = []

    def count(*_args: object) -> None:
        seen.append("")

    event.listen(Engine, "before_cursor_execute", count)
    try:
        fn()
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    return len(seen)


def seats_page(n: int, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="gpuseat-bench-seats-") as tmp:
        url, store, tokens = build(Path(tmp), n)
        database = url.removeprefix("sqlite:///")
        portal = Portal(store, load_catalog(), "scale", link_days_after_end=None)
        with TestClient(create_app(portal)) as client:
            csrf = CSRF.search(client.get("/login").text).group(1)  # type: ignore[union-attr]
            client.post("/login", data={"csrf": csrf, "username": "admin", "password": PASSWORD})

            def page() -> None:
                r = client.get("/seats")
                assert r.status_code == 200 and r.text.count('<tr data-seat="seat-') == 2 * n

            def participant() -> None:
                assert client.get(f"/t/{tokens[0]}").status_code == 200

            conn = sqlite3.connect(database)

            def plain() -> None:
                assert len(conn.execute(PLAIN_SQL).fetchall()) == n

            out = {
                "page_s": timed(page, repeat),
                "statements": statements(page),
                "plain_s": timed(plain, repeat),
                "participant_s": timed(participant, repeat),
            }
            conn.close()
        store.close()
    return out


def page_under_lock(repeat: int) -> tuple[float, float, float]:
    """(median first visit with the write lock held elsewhere, median with no lock, how long the lock was
    held while measuring), through ``gpuseat serve`` (uvicorn) on loopback: the visit is written after
    the response, as a browser sees it."""
    import os
    import socket

    import httpx

    with tempfile.TemporaryDirectory(prefix="gpuseat-bench-lock-") as tmp:
        url, store, tokens = build(Path(tmp), repeat * 2 + 4)
        store.close()
        database = url.removeprefix("sqlite:///")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = subprocess.Popen(
            [sys.executable, "-m", "gpuseat", "serve", "--db", url, "--course", "scale", *SERVE_FLAGS, str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            fresh = iter(tokens)
            with httpx.Client(base_url=base, timeout=60) as client:

                def first_visit() -> None:
                    assert client.get(f"/t/{next(fresh)}").status_code == 200

                idle = timed(first_visit, repeat)
                time.sleep(0.5)  # the idle visits are written
                holder = subprocess.Popen(
                    [sys.executable, "-c", HOLDER, database, "30"], stdout=subprocess.PIPE, text=True
                )
                assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
                held_at = time.perf_counter()
                try:
                    locked = timed(first_visit, repeat)
                    assert holder.poll() is None, "the lock was released during the measurement"
                finally:
                    holder.kill()
                    holder.wait()
                held = time.perf_counter() - held_at
        finally:
            server.terminate()
            server.wait(20)
    return locked, idle, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="pages timed per figure (median)")
    parser.add_argument("--sizes", default="100,1000", help="seat counts, comma-separated")
    parser.add_argument("--no-lock", action="store_true", help="leave out the page-under-a-lock figure")
    args = parser.parse_args()
    print(f"Seats page, median of {args.repeat} (in-process app, SQLite):")
    print(
        "| seats | Seats page | SQL statements | plain SQL (floor) | ratio | participant page "
        "| page / seat vs participant page |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in (int(x) for x in args.sizes.split(",")):
        r = seats_page(n, args.repeat)
        per_seat = r["page_s"] / n
        print(
            f"| {n:,} | {r['page_s'] * 1000:.1f} ms | {r['statements']} | {r['plain_s'] * 1000:.2f} ms "
            f"| {r['page_s'] / r['plain_s']:.0f}× | {r['participant_s'] * 1000:.1f} ms "
            f"| {per_seat * 1000:.3f} ms = {per_seat / r['participant_s']:.1%} |"
        )
    if args.no_lock:
        return
    locked, idle, held = page_under_lock(min(args.repeat, 10))
    print()
    print("A participant's first visit while another process holds SQLite's write lock:")
    print(
        f"under the lock {locked * 1000:.1f} ms, no lock (floor) {idle * 1000:.1f} ms: {locked / idle:.2f}×; "
        f"measured within {held:.1f} s of a 30 s hold (before: the page waited for the whole hold)"
    )


if __name__ == "__main__":
    main()
