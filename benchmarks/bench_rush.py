"""A registration rush, side by side with its framework floor: at 09:00 on day one every participant opens
their link and claims a pool seat (issue 38 item 19).

A store (PostgreSQL: ``--pg`` or ``GPUSEAT_TEST_PG_URL``, 2,000 participants of 20 courses; SQLite: 200
participants of 20 courses) gets a pool seat for every participant and an access link each. Then each
participant, at a random moment of the same ``--window`` (60 s), opens their page (``GET /t/<token>``) and
presses its "Take a seat" button (``POST /t/<token>/claim`` with the page's CSRF token), against two servers
on loopback, one after the other, with the same requests in the same order at the same offsets:

* ``portal`` — ``gpuseat serve`` itself, unchanged (its CLI, its uvicorn settings, its default workers: one
  process per core for PostgreSQL, one for SQLite), one server for the whole store (a link opens its own
  course's page); the claim is the portal's own route, answered by a redirect to the participant's page;
* ``bare`` — a bare Starlette endpoint under the same uvicorn settings and as many processes, doing the
  same SQL with the driver alone (sqlite3 / psycopg, a connection per thread): the page runs the portal
  page's own statements (``--floor same``, the default: the portal's cached statements compiled once at
  start — the link by the token's SHA-256, then in one read transaction the course, participant and seat,
  the run-request timeline, the assignments and the hours ledger) or only a one-statement link lookup
  (``--floor lookup``, stricter than the issue's floor), on a page carrying the same form (an HMAC CSRF
  token); then the form read and checked and the claim as ``bench_claims.py``'s plain SQL (``BEGIN
  IMMEDIATE`` / ``FOR UPDATE SKIP LOCKED``, the events row), answered by the same redirect.

Prints p50/p99 of the page, the claim and both, errors (anything but a 200 page and a 303 claim), double seats
counted in the database afterwards (a seat held twice, a participant holding two, a participant told "seated"
who holds no seat; must be 0) and the ratio portal/bare; goal: p99 ≤ 2× the bare endpoint's,
0 errors, 0 double seats. Bounded: at most ``participants`` × 2 requests per server and round, each with a
30 s time-out. The load average is printed (the machine may be shared).

Run: ``.venv/bin/python benchmarks/bench_rush.py [--pg URL] [--databases postgresql,sqlite] [--window 60]
[--rounds 1] [--pg-participants 2000] [--sqlite-participants 200] [--courses 20] [--workers N]
[--floor same|lookup]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuseat.cli.serve import default_workers  # noqa: E402
from gpuseat.core.roster import RosterText  # noqa: E402
from gpuseat.store import SeatSpec, open_store  # noqa: E402

COURSE_TOML = 'name = "Rush {i}"\nparticipants = {n}\n[schedule]\nstart = {day}\ndays = 5\n'  # day one: today
SERVERS = ("portal", "bare")
FLOORS = {
    "same": "the portal page's own statements (its link, then its course, seat, timeline, assignments, ledger)",
    "lookup": "only the link lookup (one statement)",
}

CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')

# the floor: Starlette, the same uvicorn settings and processes, the same SQL with the driver alone; run as a
# file (``bare_rush.py`` in the round's folder) so that uvicorn's workers can import ``app`` from it
BARE = """
import hashlib, hmac, os, sys, threading
from datetime import UTC, datetime
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse
from starlette.routing import Route
from gpuseat.web.limits import uvicorn_settings
sys.path.insert(0, os.environ["RUSH_BENCHMARKS"])
import bench_claims as bc

url = os.environ["RUSH_DB"]
KEY = os.environ["RUSH_KEY"].encode()
sqlite = url.startswith("sqlite")
mark = "?" if sqlite else "%s"
LOOKUP = (
    "SELECT p.id, p.key, c.key, p.course_id, p.group_name, a.seat_id, s.key, s.kind, s.host, s.memory_gb "
    "FROM access_tokens t JOIN participants p ON p.id = t.participant_id JOIN courses c ON c.id = p.course_id "
    "LEFT JOIN assignments a ON a.participant_id = p.id AND a.valid_to IS NULL "
    f"LEFT JOIN seats s ON s.id = a.seat_id WHERE t.token_hash = {mark} AND t.revoked_at IS NULL"
)
PG_CLAIM = bc.PLAIN_PG.replace("'bench', 'bench'", "%(ck)s, 'bare'")
local = threading.local()
SAME = os.environ["RUSH_FLOOR"] == "same"


def compiled(stmt):
    # a portal statement as its SQL text and default parameters for this database, compiled once here, so
    # that a request runs it through the driver alone
    from sqlalchemy.dialects import postgresql, sqlite as sqlite_dialect
    dialect = sqlite_dialect.dialect() if sqlite else postgresql.psycopg.dialect()
    c = stmt.compile(dialect=dialect)
    unset = [b.key for b in c.binds.values() if b.value is None and b.callable is None]
    state = c.construct_expanded_state({k: 0 for k in unset})  # the IN lists of literals spelled out
    return state.statement, dict(state.parameters), (list(state.positiontup) if sqlite else None)


if SAME:  # the participant page's own statements (gpuseat.store's cached ones): the link, then page_of's reads
    from gpuseat.store.hours_read import _held_query, _ledger_query, _one_timeline_query
    from gpuseat.store.rows import _page_holding
    from gpuseat.store.tokens import _token_query
    TOKEN = compiled(_token_query())
    HELD = _held_query(True, "sqlite" if sqlite else "postgresql")  # with the database's clock, as the page reads it
    PAGE = [compiled(q) for q in (_page_holding(), _one_timeline_query(), HELD, _ledger_query(True))]

    T = {name: i for i, name in enumerate(_token_query().selected_columns.keys())}
    H = {name: i for i, name in enumerate(_page_holding().selected_columns.keys())}
    SHOWN = ["participants__id", "participants__key", "courses__key", "participants__course_id",
             "participants__group_name", "assignments__seat_id", "seats__key", "seats__kind", "seats__host",
             "seats__memory_gb"]



def run(c, sql, **params):
    text, defaults, order = sql
    values = {**defaults, **params}
    return c.execute(text, [values[n] for n in order] if order is not None else values).fetchall()

def conn():
    c = getattr(local, "conn", None)
    if c is None:
        c = local.conn = bc._sqlite_conn(url) if sqlite else bc._pg_conn(url)
    return c

def lookup(token):
    return conn().execute(LOOKUP, (hashlib.sha256(token.encode()).hexdigest(),)).fetchone()

def csrf(token):
    return hmac.new(KEY, b"csrf:t:" + token.encode(), hashlib.sha256).hexdigest()

def page_rows(token):
    # the portal page's reads: its link (token, participant, course, seat held), then its course,
    # participant and seat, run-request timeline, assignments and hours ledger in one read transaction;
    # the row lookup() gives, taken from them
    c = conn()
    found = run(c, TOKEN, digest=hashlib.sha256(token.encode()).hexdigest())
    if not found:
        return None
    course, who = found[0][T["course_key"]], found[0][T["key"]]
    c.execute("BEGIN" if sqlite else "BEGIN READ ONLY")
    try:
        holding = run(c, PAGE[0], course=course, who=who)
        if holding:
            h = holding[0]
            ids = {"course_id": h[H["courses__id"]], "participant_id": h[H["participants__id"]]}
            for q in PAGE[1:]:
                run(c, q, **ids)
    finally:
        c.execute("COMMIT")
    return tuple(h[H[k]] for k in SHOWN) if holding else None


def page(request):
    token = request.path_params["token"]
    row = page_rows(token) if SAME else lookup(token)
    if row is None:
        return HTMLResponse("not a valid link", status_code=404)
    seat = f"<p>{row[6]} ({row[7]}, {row[9]} GB) on {row[8]}</p>" if row[5] is not None else (
        f'<form method="post" action="/t/{token}/claim"><input type="hidden" name="csrf" value="{csrf(token)}">'
        '<button type="submit">Take a seat</button></form>')
    return HTMLResponse(f"<html><body><h1>{row[2]}</h1><p>{row[1]}</p>{seat}</body></html>")

def claim_sqlite(c, pid, pkey, ckey, cid, grp):
    import sqlite3
    while True:
        held = c.execute(
            "SELECT s.key FROM assignments a JOIN seats s ON s.id = a.seat_id "
            "WHERE a.participant_id = ? AND a.valid_to IS NULL", (pid,)).fetchone()
        if held is not None:
            return held[0]
        now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        try:
            c.execute("BEGIN IMMEDIATE")
            row = c.execute(bc.PLAIN_SQLITE_TAKE, (pid, now, cid, grp, 0.0, 0, 0)).fetchone()
            seat = None
            if row is not None:
                seat = c.execute("SELECT key FROM seats WHERE id = ?", (row[0],)).fetchone()[0]
                c.execute(
                    "INSERT INTO events (at, course_key, actor, action, participant, seat, detail) "
                    "VALUES (?, ?, 'bare', 'seat.claim', ?, ?, '{\\"mode\\": \\"pool\\"}')", (now, ckey, pkey, seat))
            c.execute("COMMIT")
            return seat
        except sqlite3.IntegrityError:
            c.execute("ROLLBACK")

def claim_pg(c, pid, pkey, ckey, cid, grp):
    import psycopg
    while True:
        try:
            c.execute(PG_CLAIM, {"c": cid, "k": pkey, "m": 0.0, "t": datetime.now(UTC), "ck": ckey}).fetchone()
        except psycopg.errors.UniqueViolation:
            continue
        held = c.execute(
            "SELECT s.key FROM assignments a JOIN seats s ON s.id = a.seat_id "
            "WHERE a.participant_id = %s AND a.valid_to IS NULL", (pid,)).fetchone()
        return held[0] if held is not None else None

def take(token):
    row = lookup(token)
    if row is None:
        return PlainTextResponse("not a valid link", status_code=404)
    pid, pkey, ckey, cid, grp, held, held_key = row[:7]
    seat = held_key if held is not None else (claim_sqlite if sqlite else claim_pg)(conn(), pid, pkey, ckey, cid, grp)
    if seat is None:
        return HTMLResponse("<p>No seat is left for you right now.</p>", status_code=409)
    return RedirectResponse(f"/t/{token}#seat", status_code=303)

async def claim(request):
    token = request.path_params["token"]
    form = await request.form(max_files=1, max_fields=200)
    if not hmac.compare_digest(csrf(token), str(form.get("csrf", ""))):
        return PlainTextResponse("missing or wrong CSRF token", status_code=403)
    return await run_in_threadpool(take, token)

async def healthz(request):
    return PlainTextResponse("ok")

app = Starlette(routes=[Route("/t/{token}", page), Route("/t/{token}/claim", claim, methods=["POST"]),
                        Route("/healthz", healthz)])

if __name__ == "__main__":
    workers = int(os.environ["RUSH_WORKERS"])
    uvicorn.run("bare_rush:app" if workers > 1 else app, host="127.0.0.1", port=int(os.environ["RUSH_PORT"]),
                log_level="warning", access_log=True, server_header=False, workers=workers, **uvicorn_settings())
"""


def seed(url: str, tmp: Path, courses: int, participants: int) -> list[tuple[str, str, str]]:
    """``courses`` courses sharing ``participants`` people, a pool seat each; their links (course, key, token)."""
    links: list[tuple[str, str, str]] = []
    per = [participants // courses + (1 if i < participants % courses else 0) for i in range(courses)]
    with open_store(url, create=True) as store:
        for c, n in enumerate(per):
            key = f"rush{c:02d}"
            path = tmp / f"{key}.toml"
            path.write_text(COURSE_TOML.format(i=c, n=n, day=date.today().isoformat()))
            store.courses.create_course(path, key=key)
            rows = ["name,email"] + [f"P {c}-{i},p{c:02d}x{i:04d}@example.org" for i in range(n)]
            store.roster.import_roster(key, RosterText("\n".join(rows), where=f"{key} roster"))
            store.seats.add_seats(
                key, [SeatSpec(key=f"s{i:04d}", kind="gpu", host=f"node-{c}", memory_gb=16) for i in range(n)]
            )
            links += [(key, t.participant, t.token) for t in store.tokens.issue_tokens(key)]
    return links


def reset(url: str) -> None:
    """Every seat free again, and the links' visits forgotten (each round starts from the same store)."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM assignments"))
        conn.execute(text("UPDATE access_tokens SET last_used_at = NULL"))
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))
    engine.dispose()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    server: str, url: str, course: str, workers: int, log: Path, floor: str = "same"
) -> tuple[subprocess.Popen[bytes], str]:
    """``gpuseat serve`` as a participant's organizer would start it, or the bare floor with as many processes.

    The port is found free, then bound by the server: another process can take it in between (a loaded CI
    machine starts servers side by side), so a server that stops because its address is in use is started
    again on another port; any other early exit is the run's error."""
    for _ in range(5):
        started = _start(server, url, course, workers, log, floor)
        if started is not None:
            return started
    raise SystemExit(f"{server} server: its port was taken five times in a row; its log: {log}")


def _start(
    server: str, url: str, course: str, workers: int, log: Path, floor: str
) -> tuple[subprocess.Popen[bytes], str] | None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "GPUSEAT_LOG_LEVEL": "warning"}
    if server == "portal":
        argv = [sys.executable, "-m", "gpuseat", "serve", "--db", url, "--course", course, "--port", str(port)]
        argv += [] if workers == default_workers(url) else ["--workers", str(workers)]
    else:
        bare = log.parent / "bare_rush.py"
        bare.write_text(BARE)
        env |= {
            "RUSH_DB": url,
            "RUSH_PORT": str(port),
            "RUSH_WORKERS": str(workers),
            "RUSH_KEY": secrets.token_hex(32),
            "RUSH_FLOOR": floor,
            "RUSH_BENCHMARKS": str(ROOT / "benchmarks"),
        }
        argv = [sys.executable, str(bare)]
    with log.open("ab") as out:
        seen = out.tell()
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=out)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if proc.poll() is not None:
            with log.open("rb") as said:
                said.seek(seen)
                out = said.read()
            if b"address already in use" in out.lower():
                return None
            tail = out.decode(errors="replace")[-3000:]  # the round's folder goes with the run: say it here
            raise SystemExit(f"{server} server exited with {proc.returncode}; its log ({log}) ends:\n{tail}")
        try:
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{server} server did not start; its log: {log}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def rush(base: str, links: list[tuple[str, str, str]], offsets: list[float]) -> dict[str, Any]:
    """Each participant, at their offset: their page, then its "Take a seat" form. Latencies, errors, and
    who was told "seated" (a 303 back to their page)."""
    page_s: list[float] = []
    claim_s: list[float] = []
    errors: list[str] = []
    seated: set[tuple[str, str]] = set()
    limits = httpx.Limits(max_connections=len(links), max_keepalive_connections=len(links))
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as client:
        t0 = time.monotonic()

        async def one(link: tuple[str, str, str], offset: float) -> None:
            course, who, token = link
            await asyncio.sleep(max(0.0, t0 + offset - time.monotonic()))
            t = time.perf_counter()
            try:
                page = await client.get(f"/t/{token}")
                page_s.append(time.perf_counter() - t)
                form = CSRF.search(page.text)
                if page.status_code != 200 or form is None:
                    errors.append(f"GET {who}: {page.status_code}{'' if form else ', no form'}")
                    return
                t = time.perf_counter()
                r = await client.post(f"/t/{token}/claim", data={"csrf": form.group(1)})
                claim_s.append(time.perf_counter() - t)
            except httpx.HTTPError as exc:
                errors.append(f"{who}: {type(exc).__name__}")
                return
            if r.status_code != 303 or r.headers.get("location") != f"/t/{token}#seat":
                errors.append(f"POST {who}: {r.status_code}")
                return
            seated.add((course, who))

        await asyncio.gather(*(one(link, off) for link, off in zip(links, offsets, strict=True)))
        wall = time.monotonic() - t0
    return {"page": page_s, "claim": claim_s, "errors": errors, "seated": seated, "wall": wall}


def doubles(url: str, seated: set[tuple[str, str]]) -> int:
    """Seats held twice, participants holding two, and participants told "seated" who hold no seat."""
    engine = create_engine(url)
    with engine.connect() as conn:
        n = sum(
            int(conn.execute(text(q)).scalar() or 0)
            for q in (
                "SELECT count(*) FROM (SELECT seat_id FROM assignments WHERE valid_to IS NULL "
                "GROUP BY seat_id HAVING count(*) > 1) d",
                "SELECT count(*) FROM (SELECT participant_id FROM assignments WHERE valid_to IS NULL "
                "GROUP BY participant_id HAVING count(*) > 1) d",
            )
        )
        held = {
            (c, p)
            for c, p in conn.execute(
                text(
                    "SELECT c.key, p.key FROM assignments a JOIN participants p ON p.id = a.participant_id "
                    "JOIN courses c ON c.id = p.course_id WHERE a.valid_to IS NULL"
                )
            )
        }
    engine.dispose()
    return n + len(seated - held)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1)))]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_database(db: str, url: str, args: argparse.Namespace, participants: int, tmp: Path) -> list[dict[str, Any]]:
    links = seed(url, tmp, args.courses, participants)
    rng = random.Random(19)
    offsets = [rng.uniform(0, args.window) for _ in links]
    workers = args.workers or default_workers(url)  # `gpuseat serve`'s default; the bare floor gets as many
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in SERVERS}
    for _ in range(args.rounds):
        for server in SERVERS:  # taking turns: a change in the machine's load weighs on both alike
            reset(url)
            proc, base = start(server, url, links[0][0], workers, tmp / f"{server}.log", args.floor)
            try:
                for _ in range(4 * workers):  # servers up before 09:00: templates and statements ready
                    httpx.get(f"{base}/t/{links[0][2]}", timeout=30)
                got = asyncio.run(rush(base, links, offsets))
            finally:
                stop(proc)
            got["doubles"] = doubles(url, got["seated"])
            got["load"] = load()
            results[server].append(got)
    rows = []
    for server in SERVERS:
        runs = results[server]
        page = [x for r in runs for x in r["page"]]
        claim = [x for r in runs for x in r["claim"]]
        rows.append(
            {
                "database": db,
                "server": server,
                "participants": participants,
                "requests": len(page) + len(claim),
                "errors": sum(len(r["errors"]) for r in runs),
                "error_sample": [e for r in runs for e in r["errors"]][:5],
                "seated": sum(len(r["seated"]) for r in runs) // len(runs),
                "workers": workers,
                "doubles": sum(r["doubles"] for r in runs),
                "page_ms": (statistics.median(page) * 1000 if page else float("nan"), pct(page, 0.99) * 1000),
                "claim_ms": (statistics.median(claim) * 1000 if claim else float("nan"), pct(claim, 0.99) * 1000),
                "all_ms": (
                    statistics.median(page + claim) * 1000 if page else float("nan"),
                    pct(page + claim, 0.99) * 1000,
                ),
                "wall_s": max(r["wall"] for r in runs),
                "load": runs[-1]["load"],
            }
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pg", default=os.environ.get("GPUSEAT_TEST_PG_URL"), help="PostgreSQL URL (a schema is made)")
    ap.add_argument("--databases", default="postgresql,sqlite")
    ap.add_argument("--pg-participants", type=int, default=2000)
    ap.add_argument("--sqlite-participants", type=int, default=200)
    ap.add_argument("--courses", type=int, default=20)
    ap.add_argument("--window", type=float, default=60.0, help="Seconds over which the participants arrive.")
    ap.add_argument("--rounds", type=int, default=1, help="Rushes per server, the two servers taking turns.")
    ap.add_argument("--workers", type=int, default=0, help="Server processes (default: gpuseat serve's own).")
    ap.add_argument(
        "--floor",
        choices=("same", "lookup"),
        default="same",
        help="The bare page's SQL: the portal page's own statements (same, the issue's floor) or only the "
        "link lookup (one statement: a stricter floor than the issue asks).",
    )
    args = ap.parse_args()
    if args.rounds < 1 or args.courses < 1 or not 0 < args.window <= 600 or not 0 <= args.workers <= 64:
        ap.error("--rounds and --courses: 1 or more; --window: up to 600 s; --workers: 0 (the default) to 64")
    print(f"load average at start: {load()} ({os.cpu_count()} CPUs)", flush=True)
    rows: list[dict[str, Any]] = []
    for db in args.databases.split(","):
        with tempfile.TemporaryDirectory(prefix="bench-rush-") as name:
            tmp = Path(name)
            if db == "postgresql":
                if not args.pg:
                    print("postgresql skipped: no --pg URL and no GPUSEAT_TEST_PG_URL")
                    continue
                import bench_claims

                url, drop = bench_claims.pg_schema(args.pg)
                try:
                    rows += run_database(db, url, args, args.pg_participants, tmp)
                finally:
                    drop()
            else:
                rows += run_database(db, f"sqlite:///{tmp / 'rush.db'}", args, args.sqlite_participants, tmp)
        report(rows, db, args)
    print(f"load average at end: {load()}")
    bad = [r for r in rows if r["errors"] or r["doubles"]]
    return 1 if bad else 0


def report(rows: list[dict[str, Any]], db: str, args: argparse.Namespace) -> None:
    mine = {r["server"]: r for r in rows if r["database"] == db}
    if not mine:
        return
    n = next(iter(mine.values()))["participants"]
    w = next(iter(mine.values()))["workers"]
    print(
        f"\n{db}: {n} participants of {args.courses} courses arrive over {args.window:.0f} s, {args.rounds} round(s), "
        f"{w} server process(es) each; the bare page runs {FLOORS[args.floor]}"
    )
    print(
        "| server | requests | errors | seated | double seats "
        "| page p50/p99 ms | claim p50/p99 ms | all p50/p99 ms | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in mine.values():
        cells = " | ".join(f"{a:.1f} / {b:.1f}" for a, b in (r["page_ms"], r["claim_ms"], r["all_ms"]))
        print(
            f"| {r['server']} | {r['requests']} | {r['errors']} | {r['seated']} | {r['doubles']} "
            f"| {cells} | {r['load']} |"
        )
        if r["error_sample"]:
            print(f"  errors, first few: {r['error_sample']}")
    if len(mine) == 2:
        p, b = mine["portal"], mine["bare"]
        ratios = ", ".join(f"{k} p99 {p[k + '_ms'][1] / b[k + '_ms'][1]:.2f}×" for k in ("page", "claim", "all"))
        ok = p["all_ms"][1] <= 2 * b["all_ms"][1] and not p["errors"] and not p["doubles"]
        print(f"portal/bare: {ratios} — goal (p99 ≤ 2×, 0 errors, 0 double seats): {'met' if ok else 'NOT met'}")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "benchmarks"))
    raise SystemExit(main())
