"""A full disk (issue 38, item 7): a write exits 2 with "disk full at PATH, nothing changed" and stores
nothing; a read still answers.

The store lives on a real tmpfs filled to the last byte, mounted inside a private mount namespace
(``unshare --mount``): nothing outlives the test, nothing to unmount. The real ``gpuseat`` runs there, each
command a process of its own: a fork of one warm Python that then starts as ``python -m gpuseat`` does.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

# the module fixture (a store filled to the last byte, eight real gpuseat runs) is the cost and the tests are
# quick checks of its results: one xdist worker runs them all, so the fixture runs once, not once per worker
pytestmark = pytest.mark.xdist_group(name="disk_full")

REPO = Path(__file__).resolve().parents[2]
GPUSEAT = f"{sys.executable} -m gpuseat"

READS = {
    "course list": "course list",
    "course show": "course show",
    "seats status": "seats status",
    "roster list": "roster list",
    "usage": "usage",
}
WRITES = {
    "survey close": "survey close",
    "roster import": f"roster import {REPO / 'examples' / 'roster-16.csv'}",
    "seats assign": "seats assign",
}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])])
    return env


# One Python in the private mount namespace does it all: it makes the store (the set-up, in-process: Typer,
# SQLAlchemy, gpuseat's store and the catalog imported once), then each run is a fork of it that starts as
# ``python -m gpuseat`` does (a process of its own, its own store connection; it ends through ``sys.exit`` and
# the interpreter's own shutdown) instead of a fresh interpreter at about a second of CPU each
RUNS = r"""
import json, os, runpy, shutil, subprocess, sys
from gpuseat.cli import main

tmp, mnt, setup, runs = json.loads(sys.argv[1])


def gpuseat(name, args):
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for fd, ext in ((1, "out"), (2, "err")):
            os.dup2(os.open(f"{tmp}/{name}.{ext}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.argv = ["gpuseat", *args]
        runpy.run_module("gpuseat", run_name="__main__")  # sys.exit(main()): SystemExit ends this process
        os._exit(71)  # never reached
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    with open(f"{tmp}/{name}.rc", "w") as fh:
        fh.write(str(code))


for args in setup:
    print(args[:2], "exit", main([*args, "--db", f"sqlite:///{tmp}/gpuseat.db"]), flush=True)
size = os.path.getsize(f"{tmp}/gpuseat.db") + 256 * 1024
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mnt], check=True)
shutil.copy(f"{tmp}/gpuseat.db", f"{mnt}/gpuseat.db")
subprocess.run(f"cat /dev/zero > {mnt}/filler 2>/dev/null", shell=True, check=False)  # stops at the last byte
subprocess.run(f"df -k {mnt} | tail -1 > {tmp}/df", shell=True, check=True)
for name, args in runs.items():
    gpuseat(name, [*args, "--db", f"sqlite:///{mnt}/gpuseat.db"])
shutil.copy(f"{mnt}/gpuseat.db", f"{tmp}/after.db")
if os.path.exists(f"{mnt}/gpuseat.db-wal"):
    shutil.copy(f"{mnt}/gpuseat.db-wal", f"{tmp}/after.db-wal")
"""


@pytest.fixture(scope="module")
def full_disk_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """Every command above run once against a store on a full file system: name → rc, out, err."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed for the tmpfs fault tests")
    tmp = tmp_path_factory.mktemp("full")
    mnt = tmp / "mnt"
    mnt.mkdir()
    setup = [
        ["course", "create", str(REPO / "examples" / "course-2016.toml")],
        ["seats", "add", "--inventory", str(REPO / "examples" / "ibm-2xM60.toml"), "--mode", "passthrough"],
    ]
    argv = {name.replace(" ", "-"): shlex.split(args) for name, args in {**READS, **WRITES}.items()}
    plan = json.dumps([str(tmp), str(mnt), setup, argv])
    cmd = ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", RUNS, plan]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(tmp / "gpuseat.db") as conn:
        assert conn.execute("SELECT count(*) FROM courses").fetchone()[0] == 1
    assert (tmp / "df").read_text().split()[3] == "0", "the file system is not full"
    runs: dict[str, dict[str, object]] = {}
    for name in {**READS, **WRITES}:
        slug = name.replace(" ", "-")
        runs[name] = {
            "rc": int((tmp / f"{slug}.rc").read_text()),
            "out": (tmp / f"{slug}.out").read_text(),
            "err": (tmp / f"{slug}.err").read_text(),
        }
    with sqlite3.connect(tmp / "after.db") as conn:
        runs["after"] = {
            "integrity": conn.execute("PRAGMA integrity_check").fetchone()[0],
            "participants": conn.execute("SELECT count(*) FROM participants").fetchone()[0],
            "survey": conn.execute("SELECT survey_state FROM courses").fetchone()[0],
        }
    runs["mnt"] = {"path": str(mnt)}
    return runs


@pytest.mark.parametrize("name", list(READS))
def test_a_read_answers_on_a_full_disk(full_disk_runs: dict[str, dict[str, object]], name: str) -> None:
    run = full_disk_runs[name]
    assert run["rc"] == 0, run["err"]
    assert run["out"], "no answer"
    assert "error" not in str(run["err"]).lower(), run["err"]


@pytest.mark.parametrize("name", list(WRITES))
def test_a_write_on_a_full_disk_is_exit_2_and_changes_nothing(
    full_disk_runs: dict[str, dict[str, object]], name: str
) -> None:
    run = full_disk_runs[name]
    err = str(run["err"])
    assert run["rc"] == 2, (run["rc"], err)
    assert "Traceback" not in err and err.count("error:") == 1, err
    assert "disk full" in err and "nothing changed" in err, err
    assert "the change was not stored" not in err


def test_the_store_is_intact_after_the_full_disk(full_disk_runs: dict[str, dict[str, object]]) -> None:
    after = full_disk_runs["after"]
    assert after == {"integrity": "ok", "participants": 0, "survey": None}, json.dumps(after)


def test_a_file_write_on_a_full_disk_names_the_file(tmp_path: Path) -> None:
    """An output file (here course export) on a full disk: the same message, naming the file."""
    db = tmp_path / "gpuseat.db"
    subprocess.run(
        [sys.executable, "-m", "gpuseat", "course", "create", str(REPO / "examples" / "course-2016.toml"),
         "--db", f"sqlite:///{db}"],
        env=_env(), capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = f"""
        mount -t tmpfs -o size=64k tmpfs {mnt}
        cat /dev/zero > {mnt}/filler 2>/dev/null || true
        {GPUSEAT} course export --to {mnt}/course.zip --db sqlite:///{db} 2> {tmp_path}/err && echo rc=0 || echo rc=$?
        ls -a {mnt} > {tmp_path}/entries
    """
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-eu", "-c", script]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    err = (tmp_path / "err").read_text()
    assert "rc=2" in done.stdout, (done.stdout, err)
    assert f"disk full at {mnt}/course.zip, nothing changed" in err, err
    assert (tmp_path / "entries").read_text().split() == [".", "..", "filler"]
