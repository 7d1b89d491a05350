"""Fixtures for the real-Slurm tests: a one-node cluster and throw-away unix users."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import Cluster, missing_binaries

# Per xdist worker, so two workers (each with its own cluster) never share or delete each other's users.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw")
USERS = tuple(f"gs{name}-{_WORKER}" for name in ("alice", "bob", "carol"))


def _need_slurm() -> None:
    missing = missing_binaries()
    why = f"Slurm/MUNGE programs missing: {', '.join(missing)} (scripts/setup.sh installs slurm-wlm munge)"
    if missing or os.geteuid() != 0:
        why = why if missing else "the real-Slurm tests run as root (mknod, useradd, daemons as SlurmUser=root)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def unix_users() -> Iterator[tuple[str, ...]]:
    """Local users for the participants (created here, removed afterwards)."""
    _need_slurm()
    made = []
    for u in USERS:
        try:
            pwd.getpwnam(u)
        except KeyError:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", u], check=True)
            made.append(u)
    yield USERS
    for u in made:
        subprocess.run(["userdel", u], check=False)


@pytest.fixture(scope="module")
def cluster_dir() -> Iterator[Path]:
    """A directory the participants' users can read (pytest's own temp dirs are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="gpuseat-slurm-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def make_cluster(cluster_dir: Path) -> Iterator[Cluster]:
    """A cluster object whose daemons the test module starts once with its own config; stopped by pid."""
    _need_slurm()
    c = Cluster(cluster_dir)
    try:
        yield c
    finally:
        c.stop()
