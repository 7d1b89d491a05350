"""Issue 38, item 23 (the monitor's parts): a quiet start, and each seat row names its course.

``gpuseat monitor`` printed 11 Alembic INFO lines at every start; ``monitor --once --format json`` gave
seat rows without their course, so a key that two courses use (seat-001) could not be told apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpuseat.store import open_store

SRC = Path(__file__).resolve().parents[2] / "src"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
XML = Path(__file__).resolve().parents[1] / "fixtures" / "gpuseat__tesla-m60-x2.xml"
UUIDS = [
    "GPU-1b3d6a2e-5c0f-4e7a-9d41-0a6f2b9c3e01",
    "GPU-52f8c3a1-9e07-4bd2-a6c4-7e1d5b0a8f04",
    "GPU-7c9e1f40-2b8d-4a63-b5e2-91d0c4a7f602",
    "GPU-e40a9b7d-6f12-43c8-8e5a-2d7b0f9c1a03",
]


def _monitor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuseat", "monitor", "--from-xml", str(XML), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )


def test_monitor_starts_without_alembic_lines(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'new.db'}"
    for start in ("a new database", "the same database again"):
        done = _monitor("--ticks", "1", "--interval", "0.1", "--db", db)
        assert done.returncode == 0, done.stderr
        lines = done.stderr.splitlines()
        noisy = [line for line in lines if "alembic" in line.lower() or "Context impl" in line or "upgrade" in line]
        assert not noisy, (start, noisy)
        assert any("monitor stopped after 1 samples" in line for line in lines), done.stderr


def test_monitor_once_json_rows_name_their_course(tmp_path: Path, cli) -> None:
    db = f"sqlite:///{tmp_path / 'two.db'}"
    with open_store(db, create=True) as store:
        for course, devices in (("spring", UUIDS[:2]), ("autumn", UUIDS[2:])):
            store.courses.create_course(EXAMPLES / "course-2016.toml", key=course)
            # the same seat keys in both courses, on different GPUs
            store.seats.add_seats(
                course, [{"key": f"seat-{i + 1:03d}", "kind": "gpu", "device_uuid": u} for i, u in enumerate(devices)]
            )
    r = cli("monitor", "--once", "--format", "json", "--from-xml", XML, "--db", db)
    assert r.code == 0, r.err
    rows = json.loads(r.out)["seats"]
    named = {(row["course"], row["seat"]) for row in rows if row["seat"] is not None}
    assert named == {("spring", "seat-001"), ("spring", "seat-002"), ("autumn", "seat-001"), ("autumn", "seat-002")}
    r = cli("monitor", "--once", "--format", "json", "--from-xml", XML, "--db", db, "--course", "autumn")
    assert r.code == 0, r.err
    assert {row["course"] for row in json.loads(r.out)["seats"] if row["seat"]} == {"autumn"}
