"""kill -9 at every file of ``carve --out`` (each renderer): the folder is old or new, never mixed,
and the next run succeeds without ``--force``.

The real ``gpuseat`` runs in a subprocess; a small wrapper counts the files it finishes (every
file is fsync'ed once) and sends the process SIGKILL to itself at the N-th one, for every N.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

KILLER = r"""
import os, signal, sys
n = int(sys.argv[1]); seen = [0]
real_fsync = os.fsync
def fsync(fd):
    real_fsync(fd)
    seen[0] += 1
    if seen[0] == n:
        os.kill(os.getpid(), signal.SIGKILL)
os.fsync = fsync
from gpuseat.cli import main
sys.exit(main(sys.argv[2:]))
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_")}
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _carve(out: Path, render: str, args: list[str], kill_at: int = 0) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", KILLER, str(kill_at), "carve", *args, "--render", render, "--out", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=120, check=False)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("render", "first", "second"), CASES, ids=[c[0] for c in CASES])
def test_kill_at_every_file_leaves_old_or_new(tmp_path: Path, render: str, first: list[str], second: list[str]) -> None:
    ref_old, ref_new = tmp_path / "ref-old", tmp_path / "ref-new"
    assert _carve(ref_old, render, first).returncode == 0
    assert _carve(ref_new, render, second).returncode == 0
    old, new = _snapshot(ref_old), _snapshot(ref_new)
    assert old != new, "the two carves must differ for the test to mean anything"
    files = len(new)
    for n in range(1, files + 1):
        # a first carve killed at file n: nothing half-written stays, the next run needs no --force
        fresh = tmp_path / f"fresh-{n}"
        killed = _carve(fresh, render, first, kill_at=n)
        assert killed.returncode == -9, killed.stderr
        assert not fresh.exists() or _snapshot(fresh) == old
        again = _carve(fresh, render, first)
        assert again.returncode == 0, again.stderr
        assert _snapshot(fresh) == old
        # a re-carve killed at file n: the old folder exactly; the next run gives the new one
        killed = _carve(fresh, render, second, kill_at=n)
        assert killed.returncode == -9, killed.stderr
        assert _snapshot(fresh) == old, f"killed at file {n} of {files}: folder changed"
        again = _carve(fresh, render, second)
        assert again.returncode == 0, again.stderr
        assert _snapshot(fresh) == new
        leftovers = [p.name for p in tmp_path.iterdir() if ".gpuseat-" in p.name]
        assert leftovers == []
