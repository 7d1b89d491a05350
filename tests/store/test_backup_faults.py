"""``gpuseat db backup`` on a bad store or a bad target: one clear message, exit code 2, no partial or
temporary file beside the target, the store untouched (issue 38, item 6).

The real ``gpuseat`` runs in a subprocess. The full and the read-only file systems are real tmpfs mounts
inside a private mount namespace (``unshare --mount``): nothing outlives the test, nothing to unmount.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPUSEAT = f"{sys.executable} -m gpuseat"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSEAT_") or k == "GPUSEAT_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _gpuseat(*args: str | Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "gpuseat", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=120, check=False)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store with a course and its roster (some hundred kB)."""
    db = tmp_path / "store" / "gpuseat.db"
    db.parent.mkdir()
    for args in (
        ["course", "create", REPO / "examples" / "course-2016.toml"],
        ["roster", "import", REPO / "examples" / "roster-16.csv"],
    ):
        done = _gpuseat(*args, "--db", f"sqlite:///{db}")
        assert done.returncode == 0, done.stderr
    return db


def _one_error(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    assert done.stderr.count("error:") == 1 and "To fix:" in done.stderr, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def _only(folder: Path, *names: str) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)


@pytest.mark.parametrize("content", [b"this is no database\n" * 200, b"SQLite format 3\x00" + b"\xff" * 4080])
def test_a_store_that_is_not_a_database(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(content)
    before = _sha(bad)
    out = tmp_path / "out"
    out.mkdir()
    done = _gpuseat("db", "backup", "--to", out / "backup.db", "--db", f"sqlite:///{bad}")
    _one_error(done, "--db")
    _only(out)  # no backup, no temporary copy, no journal
    _only(tmp_path, "bad.db", "out")  # nothing made beside the store either
    assert _sha(bad) == before


def test_a_sqlite_file_that_is_not_gpuseats(tmp_path: Path) -> None:
    import sqlite3

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    out = tmp_path / "out"
    out.mkdir()
    done = _gpuseat("db", "backup", "--to", out / "backup.db", "--db", f"sqlite:///{other}")
    _one_error(done, "not a gpuseat database")
    _only(out)


def _in_namespace(script: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed for the tmpfs fault tests")
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-eu", "-c", script]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300, check=False)


def test_a_full_disk_leaves_no_partial_file(store: Path, tmp_path: Path) -> None:
    before = _sha(store)
    mnt = tmp_path / "full"
    mnt.mkdir()
    size = max(64 * 1024, store.stat().st_size // 2)  # room for half the copy
    done = _in_namespace(f"""
        mount -t tmpfs -o size={size} tmpfs {mnt}
        echo kept > {mnt}/other-file
        {GPUSEAT} db backup --to {mnt}/backup.db --db sqlite:///{store} 2> {tmp_path}/err && echo rc=0 || echo rc=$?
        ls -a {mnt} > {tmp_path}/entries
    """)
    assert done.returncode == 0, done.stderr
    assert "rc=2" in done.stdout, (done.stdout, (tmp_path / "err").read_text())
    err = (tmp_path / "err").read_text()
    assert "Traceback" not in err and err.count("error:") == 1
    assert f"disk full at {mnt}/backup.db, nothing changed" in err, err
    assert (tmp_path / "entries").read_text().split() == [".", "..", "other-file"]
    assert _sha(store) == before


def test_a_read_only_target(store: Path, tmp_path: Path) -> None:
    before = _sha(store)
    mnt = tmp_path / "ro"
    mnt.mkdir()
    done = _in_namespace(f"""
        mount -t tmpfs -o size=8m tmpfs {mnt}
        mount -o remount,ro {mnt}
        {GPUSEAT} db backup --to {mnt}/backup.db --db sqlite:///{store} 2> {tmp_path}/err && echo rc=0 || echo rc=$?
        ls -a {mnt} > {tmp_path}/entries
    """)
    assert done.returncode == 0, done.stderr
    err = (tmp_path / "err").read_text()
    assert "rc=2" in done.stdout, (done.stdout, err)
    assert "Traceback" not in err and err.count("error:") == 1 and "--to" in err, err
    assert (tmp_path / "entries").read_text().split() == [".", ".."]
    assert _sha(store) == before


def test_a_good_backup_still_works(store: Path, tmp_path: Path) -> None:
    done = _gpuseat("db", "backup", "--to", tmp_path / "backup.db", "--db", f"sqlite:///{store}")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "backup.db").read_bytes().startswith(b"SQLite format 3\x00")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".backup.db")]


def test_a_full_disk_under_pg_dump(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """PostgreSQL: pg_dump runs out of space; the same message, exit 2, no partial dump left."""
    from gpuseat.store import open_store
    from pg_schema import pg_schema_url

    url = pg_schema_url(request)
    store = open_store(url, create=True)
    try:
        store.courses.create_course(REPO / "examples" / "course-2016.toml")
        store.roster.import_roster(None, REPO / "examples" / "roster-16.csv")
    finally:
        store.close()
    mnt = tmp_path / "full"
    mnt.mkdir()
    done = _in_namespace(f"""
        mount -t tmpfs -o size=16k tmpfs {mnt}
        {GPUSEAT} db backup --to {mnt}/backup.dump --db '{url}' 2> {tmp_path}/err && echo rc=0 || echo rc=$?
        ls -a {mnt} > {tmp_path}/entries
    """)
    assert done.returncode == 0, done.stderr
    err = (tmp_path / "err").read_text()
    assert "rc=2" in done.stdout, (done.stdout, err)
    assert "Traceback" not in err and err.count("error:") == 1, err
    assert f"disk full at {mnt}/backup.dump, nothing changed" in err, err
    assert (tmp_path / "entries").read_text().split() == [".", ".."]
