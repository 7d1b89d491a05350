"""A full disk (issue 38, item 7): a write exits 2 with "disk full at PATH, nothing changed" and stores
nothing; a read still answers.

The store lives on a real tmpfs filled to the last byte, mounted inside a private mount namespace
(``unshare --mount``): nothing outlives the test, nothing to unmount. The real ``gpuseat`` runs there.
"""

from __future__ import annotations

import json
import os
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


@pytest.fixture(scope="module")
def full_disk_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """Every command above run once against a store on a full file system: name → rc, out, err."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed for the tmpfs fault tests")
    tmp = tmp_path_factory.mktemp("full")
    db = tmp / "gpuseat.db"
    for args in (
        ["course", "create", REPO / "examples" / "course-2016.toml"],
        ["seats", "add", "--inventory", REPO / "examples" / "ibm-2xM60.toml", "--mode", "passthrough"],
    ):
        subprocess.run(
            [sys.executable, "-m", "gpuseat", *map(str, args), "--db", f"sqlite:///{db}"],
            env=_env(), capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM courses").fetchone()[0] == 1
    mnt = tmp / "mnt"
    mnt.mkdir()
    lines = [
        f"mount -t tmpfs -o size={db.stat().st_size + 256 * 1024} tmpfs {mnt}",
        f"cp {db} {mnt}/gpuseat.db",
        f"cat /dev/zero > {mnt}/filler 2>/dev/null || true",
        f"df -k {mnt} | tail -1 > {tmp}/df",
    ]
    for name, args in {**READS, **WRITES}.items():
        slug = name.replace(" ", "-")
        lines.append(
            f"{GPUSEAT} {args} --db sqlite:///{mnt}/gpuseat.db > {tmp}/{slug}.out 2> {tmp}/{slug}.err "
            f"&& echo 0 > {tmp}/{slug}.rc || echo $? > {tmp}/{slug}.rc"
        )
    lines.append(f"cp {mnt}/gpuseat.db {tmp}/after.db")
    lines.append(f"[ -f {mnt}/gpuseat.db-wal ] && cp {mnt}/gpuseat.db-wal {tmp}/after.db-wal || true")
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-eu", "-c", "\n".join(lines)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600, check=False)
    assert done.returncode == 0, done.stderr
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
