"""The store under a bad day: a held write lock, a full disk, a read-only file system.

Each case runs the real ``gpuseat`` in a subprocess against a real SQLite file. Full and read-only
file systems are real tmpfs mounts inside a private mount namespace (``unshare --mount``), so
nothing outlives the test.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

HOLD = textwrap.dedent(
    """
    import sqlite3, sys, time
    c = sqlite3.connect(sys.argv[1], isolation_level=None)
    c.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    c.execute("ROLLBACK")
    """
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return env


def _gpuseat(*args: str | Path, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "gpuseat", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(**extra), timeout=timeout, check=False)


@pytest.fixture
def course_db(tmp_path: Path) -> Path:
    db = tmp_path / "store" / "gpuseat.db"
    db.parent.mkdir()
    course = tmp_path / "course.toml"
    course.write_text(
        'name = "Big lab"\nparticipants = 20000\n[needs]\nmin_gpu_memory_gb = 4\n[schedule]\nstart = 2026-03-02\ndays = 3\n',
        encoding="utf-8",
    )
    r = _gpuseat("course", "create", course, "--key", "demo", "--db", f"sqlite:///{db}")
    assert r.returncode == 0, r.stderr
    return db


def _hold(db: Path, seconds: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


def _survey_state(db: Path) -> str | None:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT survey_state FROM courses WHERE key = 'demo'").fetchone()[0]


def test_survey_close_waits_for_a_held_write_lock(course_db: Path) -> None:
    holder = _hold(course_db, 2.0)
    try:
        started = time.monotonic()
        r = _gpuseat("survey", "close", "--course", "demo", "--db", f"sqlite:///{course_db}")
        waited = time.monotonic() - started
    finally:
        holder.wait(timeout=30)
    assert r.returncode == 0, r.stderr
    assert waited >= 1.0  # it queued behind the holder instead of failing at once
    assert _survey_state(course_db) == "closed"


def test_survey_close_names_the_holder_after_the_timeout(course_db: Path) -> None:
    holder = _hold(course_db, 30.0)
    try:
        r = _gpuseat(
            "survey", "close", "--course", "demo", "--db", f"sqlite:///{course_db}", GPUSEAT_DB_BUSY_TIMEOUT="1"
        )
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert f"pid {holder.pid}" in r.stderr, r.stderr
    assert "more than 1 s" in r.stderr and "To fix:" in r.stderr
    assert _survey_state(course_db) is None  # nothing changed


def _in_namespace(script: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed for the tmpfs fault tests")
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-eu", "-c", script]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300, check=False)


def _roster(path: Path, people: int) -> Path:
    rows = ["name,email,group"]
    rows += [f"Person {i},person{i}@example.edu,participants" for i in range(people)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_disk_full_during_roster_import_keeps_the_store(course_db: Path, tmp_path: Path) -> None:
    small = _roster(tmp_path / "small.csv", 5)
    big = _roster(tmp_path / "big.csv", 20000)
    gpuseat = f"{sys.executable} -m gpuseat"
    mnt = tmp_path / "full"
    mnt.mkdir()
    size = course_db.stat().st_size + 64 * 1024
    script = f"""
        mount -t tmpfs -o size={size} tmpfs {mnt}
        cp {course_db} {mnt}/gpuseat.db
        {gpuseat} roster import {small} --course demo --db sqlite:///{mnt}/gpuseat.db >/dev/null 2>&1 || true
        {gpuseat} roster import {big} --course demo --db sqlite:///{mnt}/gpuseat.db > {tmp_path}/out 2> {tmp_path}/err && echo rc=0 || echo rc=$?
        cp {mnt}/gpuseat.db {tmp_path}/after.db
        [ -f {mnt}/gpuseat.db-wal ] && cp {mnt}/gpuseat.db-wal {tmp_path}/after.db-wal || true
    """
    done = _in_namespace(script)
    assert done.returncode == 0, done.stderr
    err = (tmp_path / "err").read_text()
    assert "rc=0" not in done.stdout, "the import should not fit on the small file system"
    assert "Traceback" not in err
    assert "disk is full" in err or "no space" in err.lower(), err
    with sqlite3.connect(tmp_path / "after.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        people = conn.execute("SELECT count(*) FROM participants").fetchone()[0]
    assert people in (0, 5)  # the first import, or nothing: never a half-imported roster


def test_disk_full_during_carve_keeps_the_old_folder(tmp_path: Path) -> None:
    gpuseat = f"{sys.executable} -m gpuseat"
    inventory = REPO / "examples" / "ibm-2xM60.toml"
    mnt = tmp_path / "full"
    mnt.mkdir()
    script = f"""
        mount -t tmpfs -o size=64k tmpfs {mnt}
        {gpuseat} carve {inventory} --mode passthrough --render libvirt --out {mnt}/out >/dev/null
        cp -r {mnt}/out {tmp_path}/before
        cat /dev/zero > {mnt}/filler 2>/dev/null || true
        {gpuseat} carve {inventory} --mode passthrough --seats 2 --render libvirt --out {mnt}/out 2> {tmp_path}/err && echo rc=0 || echo rc=$?
        cp -r {mnt}/out {tmp_path}/after
        ls -a {mnt} > {tmp_path}/entries
    """
    done = _in_namespace(script)
    assert done.returncode == 0, done.stderr
    err = (tmp_path / "err").read_text()
    assert "rc=0" not in done.stdout
    assert "Traceback" not in err and "no space left" in err, err
    before = {p.name: p.read_bytes() for p in (tmp_path / "before").iterdir()}
    after = {p.name: p.read_bytes() for p in (tmp_path / "after").iterdir()}
    assert before == after
    assert ".gpuseat-" not in (tmp_path / "entries").read_text()


def test_read_only_database_is_one_clear_error(course_db: Path, tmp_path: Path) -> None:
    gpuseat = f"{sys.executable} -m gpuseat"
    mnt = tmp_path / "ro"
    mnt.mkdir()
    script = f"""
        mount -t tmpfs -o size=8m tmpfs {mnt}
        cp {course_db} {mnt}/gpuseat.db
        mount -o remount,ro {mnt}
        {gpuseat} survey close --course demo --db sqlite:///{mnt}/gpuseat.db 2> {tmp_path}/err && echo rc=0 || echo rc=$?
        cp {mnt}/gpuseat.db {tmp_path}/after.db
    """
    done = _in_namespace(script)
    assert done.returncode == 0, done.stderr
    err = (tmp_path / "err").read_text()
    assert "rc=0" not in done.stdout
    assert "Traceback" not in err and "read-only" in err, err
    assert _survey_state(tmp_path / "after.db") is None
