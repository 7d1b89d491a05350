"""Shared test helpers: run the real CLI in-process and capture what it prints."""

from __future__ import annotations

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


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep every test away from the user's own data dir (bench results, course database)."""
    monkeypatch.setenv("GPUSEAT_DATA_DIR", str(tmp_path_factory.mktemp("data")))
