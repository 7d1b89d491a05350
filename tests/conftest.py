"""Shared test helpers (run the real CLI in-process and capture what it prints) and what keeps every test
hermetic: no GPUSEAT_* variable of the shell, its own data and cache dirs, no SkyPilot API server."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from cloud.fakesky import FakeSky, import_sky
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


#: the data and cache dirs of the run's collection phase (see :func:`pytest_configure`)
_COLLECTION: tempfile.TemporaryDirectory[str] | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Collection is hermetic too: test modules that load the bundled catalog when imported write its
    cache into the run's own folder, never the shell's ``~/.cache/gpuseat``; no GPUSEAT_* variable of the
    shell is seen while collecting."""
    global _COLLECTION
    _COLLECTION = tempfile.TemporaryDirectory(prefix="gpuseat-tests-")
    for name in [n for n in os.environ if n.startswith("GPUSEAT_") and not n.startswith(KEEP_PREFIX)]:
        del os.environ[name]
    os.environ["GPUSEAT_DATA_DIR"] = os.path.join(_COLLECTION.name, "data")
    os.environ["GPUSEAT_CACHE_DIR"] = os.path.join(_COLLECTION.name, "cache")


def pytest_unconfigure(config: pytest.Config) -> None:
    """The collection folder goes with the run."""
    if _COLLECTION is not None:
        _COLLECTION.cleanup()


@pytest.fixture(autouse=True)
def cheap_argon2(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Organizer passwords made in tests are argon2id at its lowest cost (one pass over 64 KiB), the way
    Django's docs advise a fast hasher for tests: a portal login verifies with the parameters its stored hash
    names, so every login path runs as shipped, at a thousandth of the CPU (argon2-cffi's default profile took
    0.12-0.3 s a check, about a minute of the suite's logins). ``@pytest.mark.shipped_argon2`` keeps the
    shipped parameters (``tests/portal/test_password_cost.py`` checks them); portals in a child process
    (``gpuseat serve``) always hash with them."""
    if request.node.get_closest_marker("shipped_argon2"):
        return
    from argon2 import PasswordHasher

    import gpuseat.store.accounts as accounts

    monkeypatch.setattr(accounts, "_hasher", lambda: PasswordHasher(time_cost=1, memory_cost=64, parallelism=1))


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


@pytest.fixture(autouse=True)
def no_skypilot_server(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hermetic tests: SkyPilot's client starts an API server (under ``~/.sky``, port 46580) on its first
    request and leaves it running, so no test reaches the real SDK.

    ``sky`` as the product loads it is the recording fake with no clusters, which is what SkyPilot answers
    on a machine without cloud credentials (a test that wants clusters patches ``load_sky`` with its own
    fake); a real request, in this process or a child, fails instead of starting a server.
    """
    monkeypatch.setenv("SKYPILOT_DISABLE_LOCAL_API_SERVER", "1")
    if importlib.util.find_spec("sky") is not None:  # else the product's own "not installed" error
        monkeypatch.setattr("gpuseat.engines.skypilot.sdk.load_sky", lambda: FakeSky(import_sky(tmp_path_factory)))


def _proc(pid: int | str, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:  # gone, or not ours to read
        return b""


def _children(pid: int) -> list[int]:
    """Every process below ``pid`` (SkyPilot's executors), deepest first."""
    below = []
    for entry in Path("/proc").iterdir():
        stat = _proc(entry.name, "stat") if entry.name.isdigit() else b""
        if stat and int(stat.rsplit(b")", 1)[1].split()[1]) == pid:
            below += [*_children(int(entry.name)), int(entry.name)]
    return below


@pytest.fixture(scope="session", autouse=True)
def no_skypilot_server_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fails the run if a test left a SkyPilot API server running (one whose environment names this run's
    temp folder: another run's server is not ours), after stopping it and its executors by pid."""
    yield
    if not Path("/proc").is_dir():
        return
    mark = str(tmp_path_factory.getbasetemp()).encode()
    left = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and b"sky.server.server" in _proc(entry.name, "cmdline"):
            env = dict(v.partition(b"=")[::2] for v in _proc(entry.name, "environ").split(b"\0"))
            if any(mark in v for v in env.values()):
                left[int(entry.name)] = env.get(b"PYTEST_CURRENT_TEST", b"?").decode(errors="replace")
    for pid in left:
        for p in [*_children(pid), pid]:  # the executors ignore SIGTERM
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
    if left:
        pytest.fail(f"a test left a SkyPilot API server running (stopped now): {left} (pid: the test running then)")
