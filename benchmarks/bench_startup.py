"""How fast gpuseat starts: ``python -c pass``, ``gpuseat --help`` and ``gpuseat plan examples/course-2016.toml``
side by side in one run (median and best of N wall times each, and the ratio to ``python -c pass``; goals:
--help under 0.3 s, plan under 0.4 s idle), then the solver choice: importing HiGHS's own bindings
(``highspy``) and solving a small MILP, against scipy's ``scipy.optimize.milp`` (the same HiGHS
underneath) when scipy is installed.

The machine's load average and a reference loop (``for i in range(10**7)``) are printed too: on a shared
machine they say how loaded it was (the best of N is the figure nearest an idle machine).
Usage: ``.venv/bin/python benchmarks/bench_startup.py [--repeat 10]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HIGHS = """
import highspy, numpy as np
h = highspy.Highs(); h.setOptionValue('output_flag', False)
lp = highspy.HighsLp(); lp.num_col_ = 2; lp.num_row_ = 1
lp.col_cost_ = np.array([1.0, 2.0]); lp.col_lower_ = np.zeros(2); lp.col_upper_ = np.array([10.0, 10.0])
lp.row_lower_ = np.array([3.0]); lp.row_upper_ = np.array([highspy.kHighsInf])
lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
lp.a_matrix_.start_ = np.array([0, 2], dtype=np.int32); lp.a_matrix_.index_ = np.array([0, 1], dtype=np.int32)
lp.a_matrix_.value_ = np.array([1.0, 1.0]); lp.integrality_ = [highspy.HighsVarType.kInteger] * 2
h.passModel(lp); h.run()
"""
SCIPY = """
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
milp(np.array([1.0, 2.0]), constraints=LinearConstraint(np.array([[1.0, 1.0]]), 3, np.inf),
     integrality=np.ones(2), bounds=Bounds(0, 10))
"""


def timings(cmd: list[str], repeat: int) -> list[float]:
    """Wall seconds of ``cmd`` over ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True, cwd=REPO)
        times.append(time.perf_counter() - t0)
    return times


def median(cmd: list[str], repeat: int) -> float:
    """Median wall seconds of ``cmd`` over ``repeat`` runs."""
    return statistics.median(timings(cmd, repeat))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    t0 = time.perf_counter()
    s = 0
    for i in range(10**7):
        s += i
    print(f"reference loop (10**7 additions):     {time.perf_counter() - t0:.2f} s")
    print(f"load average (1, 5, 15 min):          {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    py = sys.executable
    runs = {
        "python -c pass": timings([py, "-c", "pass"], args.repeat),
        "gpuseat --help": timings([py, "-m", "gpuseat", "--help"], args.repeat),
        "gpuseat plan examples/course-2016.toml": timings(
            [py, "-m", "gpuseat", "plan", "examples/course-2016.toml"], args.repeat
        ),
    }
    bare = statistics.median(runs["python -c pass"])
    goals = {"gpuseat --help": "goal < 0.3 s", "gpuseat plan examples/course-2016.toml": "goal < 0.4 s idle"}
    for name, times in runs.items():
        med, best = statistics.median(times), min(times)
        extra = f"  {med / bare:5.1f}x python -c pass  ({goals[name]})" if name in goals else ""
        print(f"{name + ':':40s} median {med:.3f} s, best {best:.3f} s{extra}")
    highs = median([py, "-c", HIGHS], args.repeat)
    print(f"import highspy + solve a tiny MILP:   {highs:.3f} s")
    if importlib.util.find_spec("scipy") is not None:
        sp = median([py, "-c", SCIPY], args.repeat)
        print(f"import scipy.optimize + milp:         {sp:.3f} s  (ratio scipy / highspy: {sp / highs:.1f}x)")
    else:
        print("scipy not installed: no comparison")


if __name__ == "__main__":
    main()
