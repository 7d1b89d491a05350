"""Who has a SQLite database open: the processes that may hold its write lock (read from ``/proc``).

Below both :mod:`gpuseat.db` (the "another writer held the database" error) and
:mod:`gpuseat.db.waiting` (the "waiting for another writer" notice), so neither imports the other.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["lock_holders"]


def lock_holders(database: Path) -> list[str]:
    """Other processes that have the SQLite file (or its WAL) open: who may hold the write lock.

    Read from ``/proc`` (Linux); an empty list where that cannot be seen (other users' processes
    without root, other systems).
    """
    try:
        targets = {os.path.realpath(database), os.path.realpath(f"{database}-wal")}
    except OSError:
        return []
    found: list[str] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            fds = list((entry / "fd").iterdir())
            if not any(os.readlink(fd) in targets for fd in fds):
                continue
            cmd = " ".join((entry / "cmdline").read_bytes().decode(errors="replace").replace("\0", " ").split())
        except OSError:
            continue
        found.append(f"pid {entry.name} ({cmd[:80] or '?'})")
    return sorted(found)
