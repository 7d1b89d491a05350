"""``gpuseat apply --host H`` for a host no seat is on (a typo of a host name) is refused, exit 2, naming the flag,
the host and the hosts the seats are on: it said "Plan: 0 …" and exited 0, so the typo silently did nothing.
A host that still has access to revoke is planned; ``gpuseat agent --host`` still starts on a host with no seat
yet (an agent waits for its seats)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuseat.store import CourseStore

from .conftest import COURSE


def _seats(
    cli: Callable[..., Any], url: str, tmp_path: Path, key: str, host: str, n: int, engine: str = "host"
) -> None:
    (tmp_path / f"{key}.txt").write_text(f"GPU 0: NVIDIA H200 (UUID: GPU-{n:08d}-0000-4000-8000-000000000000)\n")
    r = cli("seats", "add", "--from-nvidia-smi", tmp_path / f"{key}.txt", "--engine", engine, "--host", host,
            "--course", key, "--db", url)  # fmt: skip
    assert r.code == 0, r.err


def test_apply_on_a_host_no_seat_is_on_is_refused(
    store: CourseStore, url: str, tmp_path: Path, cli: Callable[..., Any]
) -> None:
    (tmp_path / "two.toml").write_text(COURSE.replace('"lab"', '"two"'))
    store.courses.create_course(tmp_path / "two.toml", key="two")
    _seats(cli, url, tmp_path, "lab", "gpu1", 1)
    _seats(cli, url, tmp_path, "two", "gpu2", 2)

    r = cli("apply", "--course", "lab", "--host", "gpu7", "--dry-run", "--db", url)  # a typo of gpu1
    assert r.code == 2, r.out + r.err
    assert "--host" in r.err and "no seat of course lab is on host 'gpu7'" in r.err and "gpu1" in r.err, r.err
    assert "Traceback" not in r.err and "Plan:" not in r.out
    r = cli("apply", "--course", "two", "--host", "gpu1", "--db", url)  # gpu1 has seats, but not of course two
    assert r.code == 2 and "no seat of course two is on host 'gpu1'" in r.err and "gpu2" in r.err, r.err
    r = cli("apply", "--host", "gpu-1", "--dry-run", "--db", url)  # every course
    assert r.code == 2 and "no seat of any course is on host 'gpu-1'" in r.err, r.err
    assert "(the seats are on gpu1, gpu2). Did you mean gpu1" in r.err, r.err
    # refused before anything is stored: a --set given with it is not kept
    r = cli("apply", "--course", "lab", "--host", "gpu7", "--set", "host.ssh_port=2222", "--db", url)
    assert r.code == 2 and store.agents.engine_settings("lab", "host") == {}

    for args in (("--course", "lab", "--host", "gpu1"), ("--host", "gpu2"), ("--course", "two")):
        r = cli("apply", *args, "--dry-run", "--db", url)
        assert r.code == 0 and "Plan:" in r.out, (args, r.out + r.err)
    # for an engine whose seats name a node (Slurm), --host is the machine apply runs on: not refused
    (tmp_path / "hpc.toml").write_text(COURSE.replace('"lab"', '"hpc"'))
    store.courses.create_course(tmp_path / "hpc.toml", key="hpc")
    _seats(cli, url, tmp_path, "hpc", "node7", 3, engine="slurm")
    r = cli("apply", "--course", "hpc", "--host", "slurmctl", "--dry-run", "--db", url)
    assert r.code == 0 and "no seat of" not in r.err, r.out + r.err
    r = cli("apply", "--engine", "host", "--host", "slurmctl", "--dry-run", "--db", url)  # its host seats: refused
    assert r.code == 2 and "no seat of any course is on host 'slurmctl' (the seats are on gpu1, gpu2)" in r.err, r.err
    # a host with access still to revoke (what an engine last found there) is planned, with no seat on it
    store.agents.set_holdings("two", "host", "gpu3", [{"what": "key", "login": "old", "engine": "host"}])
    r = cli("apply", "--course", "two", "--host", "gpu3", "--dry-run", "--db", url)
    assert r.code == 0 and "Plan:" in r.out, r.out + r.err


def test_the_agent_still_starts_on_a_host_with_no_seat_yet(store: CourseStore, url: str, tmp_path: Path) -> None:
    """A server set up before its course's seats are added: its agent leads and waits (only apply refuses)."""
    log = tmp_path / "agent.log"
    with open(log, "wb") as out:
        argv = [sys.executable, "-m", "gpuseat", "agent", "--engine", "host", "--host", "gpu9", "--poll", "0.2"]
        proc = subprocess.Popen([*argv, "--db", url], stdout=out, stderr=out, env={**os.environ})
        try:
            deadline = time.monotonic() + 90
            while "leader" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)  # a first pass with nothing to do, then it waits
            assert proc.poll() is None, log.read_text()
            assert "leader for agent:host:gpu9" in log.read_text() and "error" not in log.read_text().lower()
        finally:
            proc.terminate()
            proc.wait(30)
    assert proc.returncode == 0, log.read_text()
