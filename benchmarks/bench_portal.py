"""The portal under load: participants polling their page, then a burst of survey submissions.

A fresh store (SQLite in a temporary folder, or ``--db URL``) gets a course of ``--participants``
people, one cloud seat each, access links and an open survey; ``gpuseat serve`` (uvicorn, default
worker settings) runs as a child process on loopback. Then:

1. ``--pollers`` participants each fetch ``/t/<token>/live`` once a second for ``--duration`` seconds;
2. ``--submissions`` participants send their survey answers at once;

and the script prints p50/p99 latency of both, the error count, and how many submissions the store
holds against how many got a 2xx answer (they must be equal). Goal (issue 12): p99 < 50 ms on SQLite.

    .venv/bin/python benchmarks/bench_portal.py                      # 200 pollers × 60 s, 1,000 submissions
    .venv/bin/python benchmarks/bench_portal.py --duration 20        # a shorter run on a busy machine
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import httpx

from gpuseat.core.roster import RosterText

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuseat.core.course import Course  # noqa: E402
from gpuseat.services.courses import open_store  # noqa: E402
from gpuseat.services.survey import SurveyService  # noqa: E402

CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


def seed(db_url: str, n: int) -> list[str]:
    """A course of ``n`` participants, each with a seat and a link; the survey open. Returns the tokens."""
    text = (ROOT / "examples" / "course-2016.toml").read_text().replace("participants = 16", f"participants = {n}")
    store = open_store(db_url, create=True)
    store.create_course_from(Course.model_validate(tomllib.loads(text)), key="bench", source_text=text)
    roster = "name,email\n" + "".join(f"P {i:04d},p{i:04d}@example.org\n" for i in range(n))
    store.import_roster("bench", RosterText(roster, where="bench roster"))
    store.add_seats(
        "bench",
        [
            {
                "key": f"s{i:04d}",
                "kind": "cloud",
                "memory_gb": 4.0,
                "device_uuid": f"GPU-{i:08x}-0000-4000-8000-000000000000",
            }
            for i in range(n)
        ],
    )
    store.assign_all("bench")
    tokens = [t.token for t in store.issue_tokens("bench")]
    SurveyService(store).set_state("bench", "open")
    store.close()
    return tokens


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def poll(url: str, tokens: list[str], duration: float) -> tuple[list[float], int]:
    latencies: list[float] = []
    errors = 0
    end = time.monotonic() + duration
    limits = httpx.Limits(max_connections=len(tokens), max_keepalive_connections=len(tokens))
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:

        async def one(token: str, offset: float) -> None:
            nonlocal errors
            await asyncio.sleep(offset)  # spread the pollers over the first second
            while time.monotonic() < end:
                t0 = time.perf_counter()
                try:
                    r = await client.get(f"/t/{token}/live")
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                dt = time.perf_counter() - t0
                if ok:
                    latencies.append(dt)
                else:
                    errors += 1
                await asyncio.sleep(max(0.0, 1.0 - dt))

        await asyncio.gather(*(one(t, i / len(tokens)) for i, t in enumerate(tokens)))
    return latencies, errors


async def submit(url: str, tokens: list[str]) -> tuple[list[float], int, int]:
    limits = httpx.Limits(max_connections=len(tokens))
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        csrf = CSRF.search((await client.get("/login")).text).group(1)  # one visitor cookie, one form token
        latencies: list[float] = []
        acked = errors = 0

        async def one(i: int, token: str) -> None:
            nonlocal acked, errors
            form = {
                "csrf": csrf,
                "q_expectations": str(1 + i % 10),
                "q_format": str(1 + i % 10),
                "q_recommend": str(i % 11),
            }
            t0 = time.perf_counter()
            try:
                r = await client.post(f"/t/{token}/survey", data=form)
            except httpx.HTTPError:
                errors += 1
                return
            latencies.append(time.perf_counter() - t0)
            if r.status_code == 200 and "your answers are saved" in r.text:  # stored and committed
                acked += 1
            else:
                errors += 1

        await asyncio.gather(*(one(i, t) for i, t in enumerate(tokens)))
    return latencies, acked, errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pollers", type=int, default=200)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of polling")
    ap.add_argument("--submissions", type=int, default=1000)
    ap.add_argument("--db", help="database URL (default: SQLite in a temporary folder)")
    args = ap.parse_args()
    n = max(args.pollers, args.submissions)
    folder = Path(tempfile.mkdtemp(prefix="bench-portal-"))
    db = args.db or f"sqlite:///{folder / 'bench.db'}"
    t0 = time.perf_counter()
    tokens = seed(db, n)
    print(f"seeded {n} participants, seats and links in {time.perf_counter() - t0:.1f} s ({db.split('?')[0]})")
    port = 18000 + os.getpid() % 1000
    log = (folder / "serve.log").open("w")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "GPUSEAT_LOG_LEVEL": "warning"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuseat", "serve", "--db", db, "--course", "bench", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        lat, errs = asyncio.run(poll(url, tokens[: args.pollers], args.duration))
        print(
            f"poll: {args.pollers} participants × {args.duration:.0f} s: {len(lat)} requests, {errs} errors, "
            f"p50 {1000 * pct(lat, 0.5):.1f} ms, p99 {1000 * pct(lat, 0.99):.1f} ms "
            f"(p99 / 50 ms goal = {pct(lat, 0.99) / 0.05:.2f})"
        )
        lat, acked, errs = asyncio.run(submit(url, tokens[: args.submissions]))
        store = open_store(db)
        stored = SurveyService(store).count("bench")
        store.close()
        print(
            f"survey: {args.submissions} submissions at once: {acked} acknowledged, {errs} errors, "
            f"p50 {1000 * pct(lat, 0.5):.0f} ms, p99 {1000 * pct(lat, 0.99):.0f} ms, "
            f"median of all {1000 * statistics.median(lat) if lat else float('nan'):.0f} ms; stored {stored} "
            f"({'every acknowledged submission stored' if stored >= acked else 'LOST SUBMISSIONS'})"
        )
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


if __name__ == "__main__":
    main()
