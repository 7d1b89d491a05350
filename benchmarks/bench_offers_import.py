"""A 1,000,000-row SkyPilot ``vms.csv`` through ``gpuseat offers import`` (issue 38, item 5): wall time
and peak memory (the child's ``ru_maxrss``), side by side with a floor in the same run: a plain
``csv.reader`` pass over the same file in a fresh interpreter. Goal: peak RSS ≤ 300 MB and ≤ 20 s.

The file is built from the real AWS excerpt in tests/fixtures: every row a GPU row with its ``GpuInfo``
literal (the costly column), copied over 50 regions and 500 zones each with prices that vary by zone,
so that a million rows give a few thousand offers (one per instance type and region, at the cheapest
zone), as a real catalog does. ``--shape regions`` builds bench_catalog.py's file instead (a region per
copy, nine rows in ten without a GPU: 100,000 offers, where the output itself takes the memory).

Usage: ``.venv/bin/python benchmarks/bench_offers_import.py [--rows 1000000] [--repeat 3] [--shape zones]``.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXCERPT = REPO / "tests" / "fixtures" / "aws_v8_vms_excerpt.csv"
FLOOR = "import csv, sys\nfor row in csv.reader(open(sys.argv[1], newline='')): pass\n"
REGIONS, ZONES = 50, 500
GOAL_S, GOAL_MB = 20.0, 300.0


def build(path: Path, rows: int, shape: str = "zones") -> None:
    """``rows`` rows made from the real excerpt (see the module doc for the two shapes)."""
    with EXCERPT.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        body = list(reader)
    if shape == "zones":
        _build_zones(path, header, body, rows)
        return
    col = {c: header.index(c) for c in header}
    region, info, name, count = col["Region"], col["GpuInfo"], col["AcceleratorName"], col["AcceleratorCount"]
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        for n in range(rows):
            row = list(body[n % len(body)])
            row[region] = f"{row[region]}-{n // len(body)}"
            if n % 10:
                row[info] = row[name] = row[count] = ""
            writer.writerow(row)


def _csv_line(row: list[str]) -> str:
    line = io.StringIO()
    csv.writer(line).writerow(row)
    return line.getvalue()


def _build_zones(path: Path, header: list[str], body: list[list[str]], rows: int) -> None:
    """Row ``n`` is the excerpt's row ``n % len(body)``, copy ``c = n // len(body)``: its region gets
    ``-{c % REGIONS}``, its zone ``-{c // REGIONS % ZONES}``, its price (rows without one stay so: skipped,
    with a warning) times ``1 + (c * 7919 % 1000) / 10_000``. Each excerpt row is written once by the csv
    module with a NUL where those go (csv quotes none of them), and its copies are that line with the three
    filled in: the same bytes as a ``csv.writer`` row by row, six times faster (a million rows in ~2 s)."""
    col = {c: header.index(c) for c in header}
    region, zone, price = col["Region"], col["AvailabilityZone"], col["Price"]
    assert price < region < zone  # the order the parts are filled in below
    templates: list[tuple[list[str], float | None]] = []
    for row in body:
        blank = list(row)
        blank[region] += "-\0"
        blank[zone] += "-\0"
        if row[price]:
            blank[price] = "\0"
        parts = _csv_line(blank).split("\0")
        assert len(parts) == (4 if row[price] else 3), parts
        templates.append((parts, float(row[price]) if row[price] else None))
    with path.open("w", newline="") as out:
        out.write(_csv_line(header))
        for copy in range(-(-rows // len(body))):
            r, z = str(copy % REGIONS), str(copy // REGIONS % ZONES)
            scale = 1 + (copy * 7919 % 1000) / 10_000
            out.write(
                "".join(
                    p[0] + r + p[1] + z + p[2] if base is None else f"{p[0]}{base * scale:.6f}{p[1]}{r}{p[2]}{z}{p[3]}"
                    for p, base in templates[: rows - copy * len(body)]
                )
            )


def run(cmd: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MB) of ``cmd`` in a child process of its own."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "wall = time.perf_counter() - t\n"
        "r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(wall, r.ru_utime + r.ru_stime, r.ru_maxrss / 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True, check=True, env=env)
    wall, cpu, rss = (float(x) for x in out.stdout.split())
    return wall, cpu, rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shape", choices=("zones", "regions"), default="zones")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        catalog = Path(tmp) / "vms.csv"
        t0 = time.perf_counter()
        build(catalog, args.rows, args.shape)
        built = time.perf_counter() - t0
        size = catalog.stat().st_size
        gpuseat = [sys.executable, "-m", "gpuseat", "offers", "import", str(catalog), "--provider", "aws"]
        runs = {
            "csv.reader pass (floor)": [sys.executable, "-c", FLOOR, str(catalog)],
            "gpuseat offers import (table)": gpuseat,
            "gpuseat offers import --format json": [*gpuseat, "--format", "json"],
        }
        results = {name: [run(cmd) for _ in range(args.repeat)] for name, cmd in runs.items()}
    print(
        f"{args.rows:,} rows ({args.shape}), {size / 1e6:.1f} MB, built in {built:.1f} s; median of {args.repeat}; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    floor_wall = statistics.median(r[0] for r in results["csv.reader pass (floor)"])
    floor_cpu = statistics.median(r[1] for r in results["csv.reader pass (floor)"])
    for name, rs in results.items():
        wall, cpu, rss = (statistics.median(r[i] for r in rs) for i in range(3))
        print(
            f"  {name:38s} wall {wall:6.2f} s  cpu {cpu:6.2f} s  peak RSS {rss:6.1f} MB  "
            f"ratio to floor {wall / floor_wall:5.1f}× wall, {cpu / max(floor_cpu, 1e-9):5.1f}× cpu"
        )
    wall, _cpu, rss = (statistics.median(r[i] for r in results["gpuseat offers import (table)"]) for i in range(3))
    met = wall <= GOAL_S and rss <= GOAL_MB
    verdict = "met" if met else "NOT met"
    print(f"goal: ≤ {GOAL_S:g} s and ≤ {GOAL_MB:g} MB peak RSS: {verdict} ({wall:.2f} s, {rss:.0f} MB)")


if __name__ == "__main__":
    main()
