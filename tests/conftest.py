"""Shared test helpers: run the real CLI in-process and capture what it prints."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import settings

from gpuseat.cli import main

# Timing varies on a loaded 2-core CI machine: property tests check behaviour, not speed.
settings.register_profile("gpuseat", deadline=None)
settings.load_profile("gpuseat")


@dataclass
class Result:
    """What one CLI run returned and printed."""

    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """Call ``gpuseat ARGS...`` in-process; returns exit code, stdout and stderr."""

    def run(*args: str) -> Result:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


#: variables that configure the test run itself (e.g. GPUSEAT_TEST_PG_URL), not gpuseat: kept
KEEP_PREFIX = "GPUSEAT_TEST_"


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hermetic tests: no GPUSEAT_* variable of the shell reaches a test (GPUSEAT_DB_URL, GPUSEAT_COURSE,
    GPUSEAT_DEBUG…), and every test gets its own empty data dir (bench results, course database) and
    cache dir (the validated bundled catalog).

    A test (or a fixture after this one) sets what it needs with ``monkeypatch.setenv``; subprocesses
    inherit the cleaned environment.
    """
    for name in [n for n in os.environ if n.startswith("GPUSEAT_") and not n.startswith(KEEP_PREFIX)]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    monkeypatch.setenv("GPUSEAT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
