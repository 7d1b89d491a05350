"""``sudo gpuseat …`` after the README's set-up works on the organizer's own store, and leaves it theirs."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

COURSE = 'name = "lab"\nparticipants = 2\n[schedule]\nstart = 2026-09-07\ndays = 5\n'


@pytest.fixture
def organizer(tmp_path: Path) -> Iterator[str]:
    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("runuser") is None:
        pytest.skip("needs root, useradd and runuser")
    import tempfile

    name = f"gsorg{os.getpid() % 100000}"
    top = Path(tempfile.mkdtemp(prefix="gpuseat-sudo-", dir="/tmp"))  # traversable by the organizer
    top.chmod(0o755)
    subprocess.run(["useradd", "--create-home", "--home-dir", str(top / name), name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)
        shutil.rmtree(top, ignore_errors=True)


def test_sudo_uses_the_organizers_store_and_leaves_it_theirs(
    organizer: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cli: Any
) -> None:
    import pwd

    monkeypatch.delenv("GPUSEAT_DATA_DIR")
    monkeypatch.setenv("SUDO_USER", organizer)
    (tmp_path / "lab.toml").write_text(COURSE)
    (tmp_path / "lab.toml").chmod(0o644)
    r = cli("course", "create", tmp_path / "lab.toml", "--key", "lab")
    assert r.code == 0, r.err
    home = Path(pwd.getpwnam(organizer).pw_dir)
    db = home / ".local" / "share" / "gpuseat" / "gpuseat.db"
    assert db.exists(), "the store is the organizer's, not root's"
    uid = pwd.getpwnam(organizer).pw_uid
    for path in (db, db.parent, db.parent.parent):
        assert path.stat().st_uid == uid, path
    for path in [db, *[Path(str(db) + s) for s in ("-wal", "-shm") if Path(str(db) + s).exists()]]:
        done = subprocess.run(["runuser", "-u", organizer, "--", "test", "-w", str(path)], check=False)
        assert done.returncode == 0, f"{organizer} cannot write {path} after sudo"
    listed = cli("course", "list", "--format", "json")
    assert '"lab"' in listed.out
