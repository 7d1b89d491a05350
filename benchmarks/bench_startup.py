"""How fast ``gpuseat --help`` starts (goal: under 0.3 s), side by side with an eager start.

The eager side runs the same ``--help`` after importing what the commands use (scipy's MILP,
SQLAlchemy, PyTorch), which is what the CLI would cost without lazy imports. Prints the best of N
wall times for each and the ratio. Usage: ``.venv/bin/python benchmarks/bench_startup.py [--repeat 10]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

EAGER = "import scipy.optimize, sqlalchemy, torch; from gpuseat.cli import main; main(['--help'])"


def best(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    lazy = best([sys.executable, "-m", "gpuseat", "--help"], args.repeat)
    eager = best([sys.executable, "-c", EAGER], max(3, args.repeat // 3))
    bare = best([sys.executable, "-c", "pass"], args.repeat)
    print(f"python -c pass:            {bare:.3f} s")
    print(f"gpuseat --help (lazy):     {lazy:.3f} s")
    print(f"--help with eager imports: {eager:.3f} s")
    print(f"ratio eager / lazy: {eager / lazy:.1f}x")


if __name__ == "__main__":
    main()
