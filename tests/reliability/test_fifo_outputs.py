"""Every command that writes a file refuses a FIFO as its output before opening it: one clear message,
exit code 2, never a hang (a FIFO nobody reads blocks the writer's ``open`` forever, and one nobody
writes blocks a reader's).

The real ``gpuseat`` runs in a subprocess with a timeout as the guard; the FIFO is a real ``os.mkfifo``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
GUARD_S = 60  # a hang shows up as this timeout; a refusal takes about a second


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env["GPUSEAT_DATA_DIR"] = str(tmp / "data")
    env["GPUSEAT_DB_URL"] = f"sqlite:///{tmp / 'course.db'}"
    return env


def _gpuseat(tmp: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "gpuseat", *map(str, args)]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp), timeout=GUARD_S, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"gpuseat {' '.join(map(str, args))} hung on a FIFO for {GUARD_S} s")


VMS_CSV = (
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo\n"
    "p3.2xlarge,V100,1,8,61,3.06,us-east-1,\n"
)

# (name, arguments with {fifo} for the output path, the flag the message names)
CASES = [
    ("usage --chart", ["usage", "--chart", "{fifo}"], "--chart"),
    ("report --out", ["report", "--out", "{fifo}"], "--out"),
    ("course export --to", ["course", "export", "--to", "{fifo}"], "--to"),
    ("course export --to --force", ["course", "export", "--to", "{fifo}", "--force"], "--to"),
    ("course delete --export-to", ["course", "delete", "course-2016", "--yes", "--export-to", "{fifo}"], "--export-to"),
    ("db backup --to", ["db", "backup", "--to", "{fifo}"], "--to"),
    ("db backup --to --force", ["db", "backup", "--to", "{fifo}", "--force"], "--to"),
    ("offers import --out", ["offers", "import", "{csv}", "--provider", "aws", "--out", "{fifo}"], "--out"),
    ("carve --out", ["carve", "--gpu", "A100-40GB", "--mode", "mig", "--render", "k8s", "--out", "{fifo}"], "--out"),
    ("doctor --capture", ["doctor", "--capture", "{fifo}.tar.gz"], "--capture"),
    ("probe OUT", ["probe", "{fifo}", "--nvidia-smi", "/bin/false"], "fifo"),
    (
        "slurm config --conf-dir",
        ["slurm", "config", "--inventory", str(EXAMPLES / "ibm-2xM60.toml"), "--node", "n1", "--conf-dir", "{conf}"],
        "job_submit.lua",
    ),
    (
        "--db",
        ["course", "create", str(EXAMPLES / "course-2016.toml"), "--key", "b", "--db", "sqlite:///{fifo}"],
        "--db",
    ),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A course with its roster (what the store commands write out)."""
    tmp = tmp_path_factory.mktemp("fifo")
    for args in (
        ["course", "create", EXAMPLES / "course-2016.toml", "--key", "course-2016"],
        ["roster", "import", EXAMPLES / "roster-16.csv"],
    ):
        done = _gpuseat(tmp, *args)
        assert done.returncode == 0, done.stderr
    (tmp / "vms.csv").write_text(VMS_CSV, encoding="utf-8")
    return tmp


@pytest.mark.parametrize(("name", "args", "flag"), CASES, ids=[c[0] for c in CASES])
def test_a_fifo_as_output_is_refused_at_once(store: Path, name: str, args: list[str], flag: str) -> None:
    fifo = store / f"out-{abs(hash(name))}"
    conf = store / f"conf-{abs(hash(name))}"  # slurm.conf's folder, its job_submit.lua a FIFO
    conf.mkdir(exist_ok=True)
    for path in (fifo, Path(f"{fifo}.tar.gz"), conf / "job_submit.lua"):
        path.unlink(missing_ok=True)
        os.mkfifo(path)
    done = _gpuseat(store, *(a.format(fifo=fifo, conf=conf, csv=store / "vms.csv") for a in args))
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stderr.count("error:") == 1, done.stderr
    assert flag in done.stderr, done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # left as it was
    assert not [p.name for p in store.iterdir() if ".gpuseat-" in p.name or p.name.endswith(".tmp")]
