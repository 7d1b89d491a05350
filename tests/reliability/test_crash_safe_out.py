"""kill -9 at every file of ``carve --out`` (each renderer): the folder is old or new, never mixed,
and the next run succeeds without ``--force``.

The real ``gpuseat`` runs in a process of its own; a small wrapper counts the files it finishes (every
file is fsync'ed once) and sends the process SIGKILL to itself at the N-th one, for every N. Each run
is a fork of one warm process per test (Python and gpuseat already imported, as ``python -m gpuseat``
would be a second later): a real process, killed for real, without a second of start-up per run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

FORKER = r"""
import json, os, signal, sys
from gpuseat.cli import main
from forked import exit_code, run_main
real_fsync = os.fsync
# warm up: the test's carve once, into a folder of its own, loads what each run loads (Typer, the catalog,
# the renderer)
devnull = os.open(os.devnull, os.O_WRONLY)
saved = os.dup(1), os.dup(2)
os.dup2(devnull, 1), os.dup2(devnull, 2)
warm = main(json.loads(sys.argv[1]))
sys.stdout.flush(), sys.stderr.flush()
os.dup2(saved[0], 1), os.dup2(saved[1], 2)
assert warm == 0, warm
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    n, seen = job["kill_at"], [0]

    def kill_at_fsync_n():  # in the run's own process: SIGKILL to itself at the n-th fsync
        def fsync(fd):
            real_fsync(fd)
            seen[0] += 1
            if seen[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)
        os.fsync = fsync

    pid = run_main(job["argv"], out=job["out"], err=job["err"], before=kill_at_fsync_n)
    print(json.dumps(exit_code(pid)), flush=True)
"""


INVENTORY = str(Path(__file__).resolve().parents[2] / "examples" / "ibm-2xM60.toml")

# (renderer, arguments of the first carve, arguments of the re-carve): the two differ in content
CASES = [
    ("libvirt", [INVENTORY, "--mode", "passthrough"], [INVENTORY, "--mode", "passthrough", "--seats", "2"]),
    (
        "k8s",
        ["--gpu", "H200-141GB", "--mode", "mig", "--min-mem", "16"],
        ["--gpu", "H200-141GB", "--mode", "mig", "--min-mem", "60"],
    ),
    (
        "mig-parted",
        ["--gpu", "A100-40GB", "--mode", "mig", "--min-mem", "4"],
        ["--gpu", "A100-40GB", "--mode", "mig", "--min-mem", "9"],
    ),
    ("proxmox", [INVENTORY, "--mode", "passthrough"], [INVENTORY, "--mode", "passthrough", "--seats", "2"]),
    ("xen", [INVENTORY, "--mode", "passthrough"], [INVENTORY, "--mode", "passthrough", "--seats", "2"]),
    ("vsphere", [INVENTORY, "--mode", "passthrough"], [INVENTORY, "--mode", "passthrough", "--seats", "2"]),
    (
        "nvidia-smi",
        ["--gpu", "A100-40GB", "--mode", "mig", "--min-mem", "4"],
        ["--gpu", "A100-40GB", "--mode", "mig", "--min-mem", "19"],
    ),
    (
        "jupyterhub",
        ["--gpu", "A100-40GB", "--mode", "mig", "--min-mem", "4"],
        ["--gpu", "A100-40GB", "--mode", "mig", "--min-mem", "19"],
    ),
]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"}
    src = str(Path(__file__).resolve().parents[2] / "src")
    tests = str(Path(__file__).resolve().parents[1])  # tests/forked.py
    env["PYTHONPATH"] = os.pathsep.join([src, tests, *filter(None, [env.get("PYTHONPATH")])])
    return env


class Carver:
    """``gpuseat carve`` runs, each one a fork of a warm process (see the module docstring)."""

    def __init__(self, tmp_path: Path, render: str, args: list[str]) -> None:
        self.tmp_path = tmp_path
        warm_up = ["carve", *args, "--render", render, "--out", str(tmp_path / "warm-up")]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FORKER, json.dumps(warm_up)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def __call__(self, out: Path, render: str, args: list[str], kill_at: int = 0) -> subprocess.CompletedProcess[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        argv = ["carve", *args, "--render", render, "--out", str(out)]
        logs = self.tmp_path / "run.out", self.tmp_path / "run.err"
        job = {"argv": argv, "kill_at": kill_at, "out": str(logs[0]), "err": str(logs[1])}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the warm process ended"
        return subprocess.CompletedProcess(argv, json.loads(line), logs[0].read_text(), logs[1].read_text())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def carve(tmp_path: Path, render: str, first: list[str]) -> Iterator[Carver]:
    (tmp_path / "logs").mkdir()
    carver = Carver(tmp_path / "logs", render, first)
    try:
        yield carver
    finally:
        carver.close()


@pytest.mark.parametrize(("render", "first", "second"), CASES, ids=[c[0] for c in CASES])
def test_kill_at_every_file_leaves_old_or_new(
    tmp_path: Path, carve: Carver, render: str, first: list[str], second: list[str]
) -> None:
    ref_old, ref_new = tmp_path / "ref-old", tmp_path / "ref-new"
    assert carve(ref_old, render, first).returncode == 0
    assert carve(ref_new, render, second).returncode == 0
    old, new = _snapshot(ref_old), _snapshot(ref_new)
    assert old != new, "the two carves must differ for the test to mean anything"
    files = len(new)
    for n in range(1, files + 1):
        # a first carve killed at file n: nothing half-written stays, the next run needs no --force
        fresh = tmp_path / f"fresh-{n}"
        killed = carve(fresh, render, first, kill_at=n)
        assert killed.returncode == -9, killed.stderr
        assert not fresh.exists() or _snapshot(fresh) == old
        again = carve(fresh, render, first)
        assert again.returncode == 0, again.stderr
        assert _snapshot(fresh) == old
        # a re-carve killed at file n: the old folder exactly; the next run gives the new one
        killed = carve(fresh, render, second, kill_at=n)
        assert killed.returncode == -9, killed.stderr
        assert _snapshot(fresh) == old, f"killed at file {n} of {files}: folder changed"
        again = carve(fresh, render, second)
        assert again.returncode == 0, again.stderr
        assert _snapshot(fresh) == new
        leftovers = [p.name for p in tmp_path.iterdir() if ".gpuseat-" in p.name]
        assert leftovers == []
