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


def make_store(
    root: Path,
    key: str,
    people: dict[str, tuple[str, str | None]],
    devices: list,  # GresDevice of the course's seats
    *,
    uuids: dict[str, str] | None = None,
    tomorrow: bool = True,
) -> tuple[object, str]:
    """A course store with course ``key``: one session today all day (UTC) and one tomorrow, the roster
    (name → (unix user, seat or None)), the devices' seats recorded as Slurm seats and assigned."""
    from datetime import UTC, datetime, timedelta

    from gpuseat.engines.slurm import course as service
    from gpuseat.store import open_store

    today = datetime.now(UTC).date()
    later = f'\n[[schedule.session]]\ndate = {today + timedelta(days=1)}\nhours = "09:00-17:00"\n' if tomorrow else ""
    (root / f"{key}.toml").write_text(
        f'name = "{key}"\nparticipants = {len(people)}\n\n[needs]\nmin_gpu_memory_gb = 4\n\n'
        f"[schedule]\nstart = {today}\nend = {today + timedelta(days=1)}\n\n"
        f'[[schedule.session]]\ndate = {today}\nhours = "00:00-24:00"\n' + later
    )
    (root / f"{key}-roster.csv").write_text(
        "name,email,group,unix_user\n"
        + "".join(f"{n},{n}@example.edu,participants,{u}\n" for n, (u, _s) in people.items())
    )
    url = f"sqlite:///{root / (key + '.db')}"
    st = open_store(url, create=True)
    st.courses.create_course(root / f"{key}.toml", key=key, timezone="UTC")
    st.roster.import_roster(key, root / f"{key}-roster.csv")
    st.seats.add_seats(
        key,
        [
            {"key": d.seat, "kind": "gpu", "host": d.node, "memory_gb": 8, "device_uuid": (uuids or {}).get(d.seat)}
            for d in devices
        ],
    )
    service.record_config(st, key, devices)
    by_user = {p.unix_user: p.key for p in st.roster.participants(key)}
    for _n, (u, seat) in people.items():
        if seat:
            st.seats.assign(key, by_user[u], seat)
    return st, url


def apply(store: object, key: str, **settings: object):
    """``gpuseat apply --course KEY --engine slurm`` in-process, with ``settings`` stored first."""
    from gpuseat.engines.apply import one_pass
    from gpuseat.engines.runner import Runner

    if settings:
        store.agents.set_engine_settings(key, "slurm", {k: str(v) for k, v in settings.items()})  # type: ignore[attr-defined]
    return one_pass(store, course=key, engine="slurm", runner=Runner())  # type: ignore[arg-type]


def plan(store: object, key: str):
    """The slurm engine's plan for ``key`` now (a dry runner: nothing changes)."""
    from gpuseat.engines.apply import plan_all
    from gpuseat.engines.runner import Runner

    (planned,) = plan_all(store, course=key, engine="slurm", runner=Runner(dry_run=True))  # type: ignore[arg-type]
    assert planned.error is None, planned.error
    return planned.changes
