"""Fixtures for the delivery tests: a stand-in GPU host with a real sshd, and a course on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .hostlab import MIG_AND_WHOLE, Lab, free_port, have_tools, new_lab

COURSE_TOML = """name = "Host lab"
participants = 4

[needs]
min_gpu_memory_gb = 16
isolation = "partitioned"

[schedule]
start = 2026-09-07
days = 5
"""


@pytest.fixture
def bare_lab() -> Iterator[Lab]:
    """An empty stand-in host (the test builds its GPUs); users, group and sshd removed after."""
    why = have_tools()
    if why:
        pytest.skip(why)
    made = new_lab()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def lab(bare_lab: Lab) -> Lab:
    """A stand-in host (two GPUs: three MIG 1g.18gb devices on GPU 0, GPU 1 whole)."""
    bare_lab.build(MIG_AND_WHOLE)
    return bare_lab


def make_course(lab: Lab, tmp_path: Path, cli: Callable[..., object], db: str, toml: str = COURSE_TOML) -> None:
    """Course ``lab`` in ``db`` (from ``toml``): ann, ben, cat, dan; four host seats from ``nvidia-smi -L``."""
    import subprocess

    (tmp_path / "lab.toml").write_text(toml)
    for who in ("ann", "ben", "cat", "dan"):
        lab.person(who)
    (tmp_path / "roster.csv").write_text(lab.roster())
    listing = subprocess.run([str(lab.nvidia_smi), "-L"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "smi-L.txt").write_text(listing)
    lab.port = free_port()
    for args in (
        ("course", "create", tmp_path / "lab.toml", "--key", "lab"),
        ("roster", "import", tmp_path / "roster.csv"),
        ("seats", "add", "--from-nvidia-smi", tmp_path / "smi-L.txt", "--engine", "host", "--host", "gpu1"),
    ):
        r = cli(*args, "--db", db)
        assert r.code == 0, (args, r.out, r.err)  # type: ignore[attr-defined]


@pytest.fixture
def hostcourse(lab: Lab, tmp_path: Path, cli: Callable[..., object]) -> tuple[Lab, str]:
    """Course ``lab`` in a fresh SQLite file: ann, ben, cat, dan; four host seats from ``nvidia-smi -L``."""
    db = f"sqlite:///{tmp_path / 'course.db'}"
    make_course(lab, tmp_path, cli, db)
    return lab, db


@pytest.fixture
def pghostcourse(
    lab: Lab, tmp_path: Path, cli: Callable[..., object], request: pytest.FixtureRequest
) -> tuple[Lab, str]:
    """The same course in a fresh PostgreSQL schema (GPUSEAT_TEST_PG_URL; required on CI)."""
    from pg_schema import pg_schema_url

    db = pg_schema_url(request)
    make_course(lab, tmp_path, cli, db)
    return lab, db
