"""How fast gpuseat starts: ``python -c pass``, ``gpuseat --help`` and ``gpuseat plan examples/course-2016.toml``
side by side (median of N wall times each; goals: --help under 0.3 s, plan under 0.6 s), then the solver
choice: importing HiGHS's own bindings (``highspy``) and solving a small MILP, against scipy's
``scipy.optimize.milp`` (the same HiGHS underneath) when scipy is installed.

A reference loop (``for i in range(10**7)``) is timed too: on a shared machine it says how loaded it was.
Usage: ``.venv/bin/python benchmarks/bench_startup.py [--repeat 10]``.
"""

from __future__ import annotations

import argparse
import importlib.util
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


def median(cmd: list[str], repeat: int) -> float:
    """Median wall seconds of ``cmd`` over ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True, cwd=REPO)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    t0 = time.perf_counter()
    s = 0
    for i in range(10**7):
        s += i
    print(f"reference loop (10**7 additions):     {time.perf_counter() - t0:.2f} s")
    py = sys.executable
    bare = median([py, "-c", "pass"], args.repeat)
    helps = median([py, "-m", "gpuseat", "--help"], args.repeat)
    plan = median([py, "-m", "gpuseat", "plan", "examples/course-2016.toml"], args.repeat)
    print(f"python -c pass:                       {bare:.3f} s")
    print(f"gpuseat --help:                       {helps:.3f} s  (goal < 0.3 s)")
    print(f"gpuseat plan examples/course-2016.toml: {plan:.3f} s  (goal < 0.6 s; no solver imported: nothing limited)")
    highs = median([py, "-c", HIGHS], args.repeat)
    print(f"import highspy + solve a tiny MILP:   {highs:.3f} s")
    if importlib.util.find_spec("scipy") is not None:
        sp = median([py, "-c", SCIPY], args.repeat)
        print(f"import scipy.optimize + milp:         {sp:.3f} s  (ratio scipy / highspy: {sp / highs:.1f}x)")
    else:
        print("scipy not installed: no comparison")


if __name__ == "__main__":
    main()
