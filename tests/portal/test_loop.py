"""Nothing one client does freezes the portal for the others: ``/healthz`` stays as fast as when idle.

A wrong-login storm (8 clients from 8 addresses, argon2 on every try) and a SQLite write lock held
by another process (as the monitor or a CLI command may hold it) run while a probe times ``/healthz``;
its p99 must stay within 2x the idle p99 measured just before (ratios, never absolute times).

On a loaded 2-core CI machine one comparison can exceed 2x by chance (the p99 of 300 probes is
their third-worst); a freeze cannot pass by chance: it held ``/healthz`` for seconds on every try
(12.6 s for 72 wrong logins before the fix). So each test takes the best of up to three
comparisons: noise has to lose all three, a freeze loses every one.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from gpuseat.services.demo import seed_demo

from .live import SRC, login, start

PROBES = 300
#: the module's tests share one seeded demo server: one xdist worker runs them, so it starts once
pytestmark = pytest.mark.xdist_group(name="portal-loop-demo")


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def probe(url: str, n: int = PROBES) -> list[float]:
    """``n`` ``/healthz`` round trips on one keep-alive connection, paced 5 ms apart (seconds each)."""
    out = []
    with httpx.Client(base_url=url, timeout=60) as c:
        c.get("/healthz")
        for _ in range(n):
            t0 = time.perf_counter()
            assert c.get("/healthz").status_code == 200
            out.append(time.perf_counter() - t0)
            time.sleep(0.005)  # pacing, so the probe spans the storm (about 2 s)
    return out


STORM = textwrap.dedent(
    """
    import re, sys, threading, httpx
    url, kind, password, token = sys.argv[1:5]
    go, stop = threading.Event(), threading.Event()
    counts = [0] * 8

    def client(i):
        transport = httpx.HTTPTransport(local_address=f"127.0.0.{i + 2}")  # 8 addresses: 8 rate-limit keys
        with httpx.Client(base_url=url, transport=transport, timeout=120) as c:
            csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', c.get("/login").text).group(1)
            while not stop.is_set():
                go.wait()
                pw = password if kind == "writes" else f"wrong-{counts[i]}"
                c.post("/login", data={"csrf": csrf, "username": "admin", "password": pw})
                if kind == "writes":
                    c.get(f"/t/{token}")
                    c.cookies.pop("gpuseat_session", None)
                counts[i] += 1

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(8)]
    for t in threads:
        t.start()
    for line in sys.stdin:
        {"go": go.set, "pause": go.clear}.get(line.strip(), lambda: None)()
        print(sum(counts), flush=True)
    stop.set()
    """
)


class Storm:
    """8 clients in their own process, switched on and off between probe rounds."""

    def __init__(self, server, kind: str) -> None:
        demo = server.extra["demo"]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", STORM, server.url, kind, demo.password, next(iter(demo.links.values()))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={"PYTHONPATH": str(SRC)},
        )

    def send(self, word: str) -> int:
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(120)


def compare(url: str, storm: Storm, rounds: int = 3) -> tuple[float, float, int]:
    """(idle p99, busy p99, requests the storm made): idle and busy probe rounds interleaved, so the
    machine's other load weighs on both alike."""
    idle: list[float] = []
    busy: list[float] = []
    for _ in range(rounds):
        idle += probe(url, PROBES // rounds)
        storm.send("go")
        time.sleep(0.3)  # let the storm fill the queue
        busy += probe(url, PROBES // rounds)
        done = storm.send("pause")
    return p99(idle), p99(busy), done


def best_of(url: str, storm: Storm, attempts: int = 3) -> tuple[float, float, int]:
    """The comparison with the lowest busy/idle ratio among up to ``attempts`` (stops at one within 2x)."""
    results = []
    for _ in range(attempts):
        idle, busy, done = compare(url, storm)
        results.append((idle, busy, done))
        print(f"healthz p99 idle {idle * 1000:.2f} ms, busy {busy * 1000:.2f} ms ({done} storm requests)")
        if busy <= 2 * idle:
            break
    return min(results, key=lambda r: r[1] / r[0])


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("loop")
    demo = seed_demo(folder / "demo")
    server = start(["--db", demo.db_url, "--course", demo.course, "--links-expire", "never"], folder / "serve.log")
    server.extra.update(demo=demo)
    yield server
    assert server.stop() == 0


def test_a_wrong_login_storm_does_not_stall_healthz(demo_server):
    storm = Storm(demo_server, "wrong")
    try:
        idle, busy, tries = best_of(demo_server.url, storm)
    finally:
        storm.close()
    print(f"healthz p99 idle {idle * 1000:.2f} ms, during {tries} wrong logins {busy * 1000:.2f} ms")
    assert tries >= 8  # the storm really ran (each try costs an argon2 check)
    assert busy <= 2 * idle, (idle, busy)


def test_a_held_sqlite_write_lock_does_not_stall_healthz(demo_server):
    demo = demo_server.extra["demo"]
    path = demo.db_url.removeprefix("sqlite:///")
    holder = sqlite3.connect(path, timeout=1, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process would hold it the same way: writers must wait
    storm = Storm(demo_server, "writes")
    try:
        idle, busy, _ = best_of(demo_server.url, storm)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        storm.close()
    print(f"healthz p99 idle {idle * 1000:.2f} ms, with the write lock held {busy * 1000:.2f} ms")
    assert busy <= 2 * idle, (idle, busy)
    with httpx.Client(base_url=demo_server.url, timeout=120) as c:  # the lock is gone: logins write again
        assert login(c, demo_server.url, demo.password).status_code == 303
