"""How fast gpuseat starts (issue 39, Performance): ``gpuseat plan --help``, ``gpuseat plan
examples/course-2016.toml`` and ``gpuseat seats status`` on a 16-person SQLite course, each side by side
with ``python -c pass`` in one run, as the ratio to it (goals: ≤ 8×, ≤ 20×, ≤ 25×).

The runs are interleaved (one of each command per round, N rounds) and each figure is the median of
its N runs, so a load change during the run hits every command alike. Two clocks: wall time (what a
user waits) and the child's CPU time (user + system, from ``wait4``), which a shared machine disturbs
much less. Then the floors (the imports a command cannot avoid: Typer, Pydantic, SQLAlchemy's ORM and
the schema; each alone, then each command's together, seats status's without Pydantic), the heavy
packages each command loads and those ``import gpuseat.cli`` loads (none, by
tests/test_startup_imports.py), and the solver choice: HiGHS's own bindings (``highspy``) against
scipy's ``milp`` (the same HiGHS underneath) when scipy is installed.

The course is built in a temporary data folder from examples/ (course-2016, roster-16, the 2× M60
server's four seats and twelve cloud seats, all assigned) with the CLI itself; no GPUSEAT_* variable of
the shell reaches the runs. Usage: ``.venv/bin/python benchmarks/bench_startup.py [--repeat 15]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
#: top-level packages a start-up should load only when its command uses them
HEAVY = (
    "sqlalchemy",
    "alembic",
    "fastapi",
    "starlette",
    "uvicorn",
    "kubernetes",
    "torch",
    "numpy",
    "scipy",
    "highspy",
    "pydantic",
    "rich",
    "jinja2",
    "psycopg",
)
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
#: name → (gpuseat arguments, goal as a ratio to python -c pass)
COMMANDS: dict[str, tuple[list[str], float]] = {
    "gpuseat plan --help": (["plan", "--help"], 8),
    "gpuseat plan examples/course-2016.toml": (["plan", "examples/course-2016.toml"], 20),
    "gpuseat seats status (16 people)": (["seats", "status"], 25),
}
MODEL = "from pydantic import BaseModel\nclass M(BaseModel):\n    x: int"
#: imports a command cannot do without, for reading the ratios: each alone, then each command's together
FLOORS = {
    "import typer (every command)": "import typer",
    "import pydantic + a model (plan)": MODEL,
    "import sqlalchemy.orm (seats status)": "import sqlalchemy.orm",
    "import gpuseat.db.models (the schema)": "import gpuseat.db.models",
    "plan's libraries: typer, rich, pydantic": f"import typer, rich.console, rich.table\n{MODEL}",
    "seats status's: typer, rich, ORM, schema": "import typer, rich.console, rich.table, gpuseat.db.models",
    "…its light read instead (store.lite, no ORM)": (
        "import typer, rich.console, rich.table\nfrom gpuseat.store.lite import seat_status\n"
        "assert seat_status(None, None) is not None"
    ),
}


def gpuseat(args: list[str]) -> list[str]:
    """The command line a user types: the ``gpuseat`` script beside this interpreter, else ``-m``."""
    script = Path(PY).with_name("gpuseat")
    return [str(script), *args] if script.exists() else [PY, "-m", "gpuseat", *args]


def clean_env(data_dir: Path) -> dict[str, str]:
    """The shell's environment without GPUSEAT_* variables, with its own data folder, and with bytecode
    caching on: a user's installed gpuseat runs from ``.pyc`` files, not by compiling every module."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["GPUSEAT_DATA_DIR"] = str(data_dir)
    return env


def build_course(env: dict[str, str]) -> None:
    """The 2016 course with its 16 participants, each holding a seat, stored in SQLite by the CLI."""
    steps = [
        ["course", "create", "examples/course-2016.toml", "--plan-option", "1"],
        ["roster", "import", "examples/roster-16.csv"],
        ["seats", "add", "--inventory", "examples/ibm-2xM60.toml", "--mode", "passthrough"],
        ["seats", "add", "--cloud"],
        ["seats", "assign"],
    ]
    for args in steps:
        subprocess.run(gpuseat(args), capture_output=True, check=True, cwd=REPO, env=env)


def run_once(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run of ``cmd``, which must succeed."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def interleaved(cmds: dict[str, list[str]], repeat: int, env: dict[str, str]) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds of each command, one run of each per round."""
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    for cmd in cmds.values():  # a round not counted: writes stale .pyc files, warms the file cache
        run_once(cmd, env)
    for _ in range(repeat):
        for name, cmd in cmds.items():
            wall, cpu = run_once(cmd, env)
            walls[name].append(wall)
            cpus[name].append(cpu)
    return {name: (statistics.median(walls[name]), statistics.median(cpus[name])) for name in cmds}


def heavy_loaded(code: str, env: dict[str, str]) -> list[str]:
    """The :data:`HEAVY` packages in ``sys.modules`` after ``code`` ran in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    proc = subprocess.run([PY, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO, env=env)
    loaded = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    return [name for name in HEAVY if name in loaded]


def print_ratios(title: str, medians: dict[str, tuple[float, float]], goals: dict[str, float]) -> None:
    """One line per command: wall and CPU medians, each as a ratio to ``python -c pass``."""
    bare_wall, bare_cpu = medians["python -c pass"]
    print(f"\n{title}")
    print(f"  {'':44s} {'wall':>9s} {'ratio':>7s}   {'cpu':>9s} {'ratio':>7s}")
    for name, (wall, cpu) in medians.items():
        goal = f"   goal ≤ {goals[name]:g}x" if name in goals else ""
        print(
            f"  {name:44s} {wall * 1000:7.1f}ms {wall / bare_wall:6.1f}x   "
            f"{cpu * 1000:7.1f}ms {cpu / bare_cpu:6.1f}x{goal}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=15, help="Rounds (runs of each command); the figure is the median.")
    ap.add_argument("--no-solver", action="store_true", help="Skip the highspy/scipy comparison.")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    t0 = time.perf_counter()
    s = 0
    for i in range(10**7):
        s += i
    print(f"reference loop (10**7 additions): {time.perf_counter() - t0:.2f} s")
    print(f"load average (1, 5, 15 min):      {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="gpuseat-bench-startup-") as tmp:
        env = clean_env(Path(tmp) / "data")
        build_course(env)
        cmds = {"python -c pass": [PY, "-c", "pass"]} | {name: gpuseat(a) for name, (a, _) in COMMANDS.items()}
        goals = {name: goal for name, (_, goal) in COMMANDS.items()}
        print_ratios(
            f"start-up, median of {args.repeat} interleaved runs each:", interleaved(cmds, args.repeat, env), goals
        )
        floors = {"python -c pass": [PY, "-c", "pass"]} | {name: [PY, "-c", code] for name, code in FLOORS.items()}
        print_ratios(
            f"floors, median of {args.repeat} interleaved runs each:", interleaved(floors, args.repeat, env), {}
        )
        print("\nheavy packages loaded:")
        heavy = heavy_loaded("import gpuseat.cli", env)
        print(f"  {'import gpuseat.cli':44s} {', '.join(heavy) or 'none'}")
        for name, (cli_args, _) in COMMANDS.items():
            heavy = heavy_loaded(f"from gpuseat.cli import main\nassert main({cli_args!r}) == 0", env)
            print(f"  {name:44s} {', '.join(heavy) or 'none'}")
    if args.no_solver:
        return
    highs = statistics.median(run_once([PY, "-c", HIGHS], os.environ.copy())[0] for _ in range(args.repeat))
    print(f"\nimport highspy + solve a tiny MILP:   {highs:.3f} s")
    if importlib.util.find_spec("scipy") is not None:
        sp = statistics.median(run_once([PY, "-c", SCIPY], os.environ.copy())[0] for _ in range(args.repeat))
        print(f"import scipy.optimize + milp:         {sp:.3f} s  (ratio scipy / highspy: {sp / highs:.1f}x)")
    else:
        print("scipy not installed: no comparison")


if __name__ == "__main__":
    main()
