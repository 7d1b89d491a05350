"""The suite's xdist groups hold: tests marked ``xdist_group(name=…)`` run on one worker under ``scripts/test.sh``'s
``-n N --dist loadgroup``. The libvirtd tests rely on it (one daemon per machine, behind a lock: a group split
over two workers left one waiting out the other's whole session, 12–20 minutes), and so do the files whose
module fixture must run once. pytest-xdist 3.8 groups by renaming ``item._nodeid``, which pytest 9.2 stopped
reading (pyproject pins pytest below 9.2); this runs a small real session to check, whatever the versions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = """
import os, pathlib, pytest

pytestmark = pytest.mark.xdist_group(name="together")

@pytest.mark.parametrize("n", range(6))
def test_grouped(n):
    pathlib.Path(os.environ["OUT"], f"g{n}").write_text(os.environ.get("PYTEST_XDIST_WORKER", "none"))
"""
LOOSE = """
import time, pytest

@pytest.mark.parametrize("n", range(12))
def test_loose(n):
    time.sleep(0.05)
"""


def test_a_group_runs_on_one_worker_while_the_rest_spreads(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_a_grouped.py").write_text(TESTS)
    (tmp_path / "suite" / "test_b_loose.py").write_text(LOOSE)
    (tmp_path / "out").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GPUSEAT_"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q", "-p", "no:randomly", "-p",
         "no:cacheprovider", "suite"],
        cwd=tmp_path, env={**env, "OUT": str(tmp_path / "out")}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    workers = {p.name: p.read_text() for p in (tmp_path / "out").iterdir()}
    assert len(workers) == 6 and set(workers.values()) <= {"gw0", "gw1"}, workers
    assert len(set(workers.values())) == 1, f"the group was split over the workers: {workers}"
