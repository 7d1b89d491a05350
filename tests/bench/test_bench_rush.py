"""``benchmarks/bench_rush.py`` end to end at a small size: the real ``gpuseat serve`` and the bare floor each
take a rush of participants who open their page and press "Take a seat"; every one is seated once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_small_rush_seats_everyone_once_on_both_servers() -> None:
    databases = "postgresql,sqlite" if os.environ.get("GPUSEAT_TEST_PG_URL") else "sqlite"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_rush.py"),
            "--databases",
            databases,
            "--pg-participants",
            "40",
            "--sqlite-participants",
            "40",
            "--courses",
            "4",
            "--window",
            "1",  # 40 arrivals in one second: each rush lasts at least its window, and a denser rush races harder
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    for db in databases.split(","):
        assert (
            f"{db}: 40 participants of 4 courses arrive over 1 s, 1 round(s), 2 server process(es) each" in done.stdout
        )
    rows = re.findall(r"^\| (portal|bare) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", done.stdout, re.M)
    # per server and database: 80 requests (a page and a claim each), 0 errors, 40 seated, 0 double seats
    assert sorted(rows) == sorted([(s, "80", "0", "40", "0") for s in ("portal", "bare")] * len(databases.split(",")))
