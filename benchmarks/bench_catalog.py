"""A big SkyPilot catalog in table output: ``gpuseat offers import`` on N rows (default 150,000, built
from the real AWS excerpt in tests/fixtures, one region per copy, nine rows in ten without a GPU as in
SkyPilot's own catalogs) against two floors in the same run: ``python -c pass`` (interpreter start) and
a plain ``csv.DictReader`` pass over the same file in a fresh interpreter. Prints medians (wall and
CPU) and the ratios; the goal is under 5 s for 150,000 rows.

Usage: ``.venv/bin/python benchmarks/bench_catalog.py [--rows 150000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXCERPT = REPO / "tests" / "fixtures" / "aws_v8_vms_excerpt.csv"
FLOOR_CSV = "import csv, sys\nfor row in csv.DictReader(open(sys.argv[1], newline='')): pass\n"


def build(path: Path, rows: int) -> None:
    """``rows`` rows from the real excerpt: copies in new regions, GPU columns blanked in 9 of 10."""
    with EXCERPT.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        body = list(reader)
    region, info, name, count = (header.index(c) for c in ("Region", "GpuInfo", "AcceleratorName", "AcceleratorCount"))
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        for n in range(rows):
            row = list(body[n % len(body)])
            row[region] = f"{row[region]}-{n // len(body)}"
            if n % 10:
                row[info] = row[name] = row[count] = ""
            writer.writerow(row)


def timed(cmd: list[str], repeat: int) -> tuple[float, float]:
    """Median wall and CPU seconds (children's user + system) of ``cmd`` over ``repeat`` runs."""
    walls, cpus = [], []
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True, cwd=REPO, env=env)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=150_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        catalog = Path(tmp) / "vms.csv"
        build(catalog, args.rows)
        size = catalog.stat().st_size
        runs = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "csv.DictReader pass": [sys.executable, "-c", FLOOR_CSV, str(catalog)],
            "gpuseat offers import (table)": [
                sys.executable,
                "-m",
                "gpuseat",
                "offers",
                "import",
                str(catalog),
                "--provider",
                "aws",
            ],
        }
        results = {name: timed(cmd, args.repeat) for name, cmd in runs.items()}
    print(f"{args.rows:,} rows, {size / 1e6:.1f} MB, median of {args.repeat}; load {os.getloadavg()[0]:.2f}")
    gpuseat_wall, gpuseat_cpu = results["gpuseat offers import (table)"]
    for name, (wall, cpu) in results.items():
        ratio = f"{gpuseat_wall / wall:6.1f}× wall, {gpuseat_cpu / max(cpu, 1e-9):6.1f}× cpu"
        print(f"  {name:32s} wall {wall:6.2f} s  cpu {cpu:6.2f} s  gpuseat/this {ratio}")
    print(f"goal: under 5 s for 150,000 rows: {'met' if gpuseat_wall < 5 else 'NOT met'} ({gpuseat_wall:.2f} s wall)")


if __name__ == "__main__":
    main()
