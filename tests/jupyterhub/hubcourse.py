"""A course for the hub tests, built from a real capture: seats are the MIG devices an H100 listed
(``nvidia-smi -L`` in tests/fixtures), monitor readings come from the same capture's CSV sections.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from gpuseat.core.roster import RosterText
from gpuseat.nvsmi import merge_list, parse_compute_apps_csv, parse_list, parse_query_gpu_csv
from gpuseat.readings import Snapshot
from gpuseat.store import CourseStore, open_store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H100_MIG = FIXTURES / "nvidia_gpu_exporter__linux-x86_64__nvidia-h100-mig__590.48.01.txt"
HOST = "gpu-node-1"


def section(title: str) -> str:
    """The body of one section of the capture (see tests/monitor/conftest.py)."""
    lines = H100_MIG.read_text(encoding="utf-8").splitlines()
    i = lines.index(f"# {title}") + 1
    while lines[i].startswith("#"):
        i += 1
    body = []
    while i < len(lines) and not lines[i].startswith("####"):
        body.append(lines[i])
        i += 1
    return "\n".join(body).strip() + "\n"


def mig_devices() -> list[tuple[str, str]]:
    """``(MIG UUID, profile)`` of the captured H100's MIG devices, in device order."""
    (gpu,) = parse_list(section("capabilities :: list (-L)"))
    return [(m.uuid, m.profile) for m in gpu.mig]


def seat_specs(count: int) -> list[dict]:
    """Seats for the last ``count`` MIG devices (the small 2g.20gb / 1g.10gb slices first in line)."""
    devices = mig_devices()[-count:]
    return [
        {
            "key": f"mig-{i + 1}",
            "kind": "mig",
            "host": HOST,
            "device_uuid": uuid,
            "profile": profile,
            "memory_gb": float(re.search(r"(\d+)gb", profile).group(1)),  # type: ignore[union-attr]
        }
        for i, (uuid, profile) in enumerate(devices)
    ]


COURSE_TOML = """name = "Hub workshop"
participants = {n}

[needs]
min_gpu_memory_gb = 8
isolation = "partitioned"

[schedule]
start = 2026-09-07
days = 5
"""


def make_course(url: str, tmp: Path, *, key: str, people: list[str], seats: int, assign: int = 0) -> CourseStore:
    """A course ``key`` with ``people`` (key = email local part = unix user) and ``seats`` MIG seats;
    the first ``assign`` people get the seats in order."""
    store = open_store(url, create=True)
    course_file = tmp / f"{key}.toml"
    course_file.write_text(COURSE_TOML.format(n=len(people)), encoding="utf-8")
    store.courses.create_course(course_file, key=key)
    roster = "name,email,group,unix_user\n" + "".join(f"{p.title()},{p}@example.edu,participants,{p}\n" for p in people)
    store.roster.import_roster(key, RosterText(roster, where=f"{key}-roster.csv"))
    added = store.seats.add_seats(key, seat_specs(seats))
    for person, seat in zip(people[:assign], added, strict=False):
        store.seats.assign(key, person, seat.key)
    return store


def reading(now: float, busy: set[str]) -> Snapshot:
    """The captured H100 (idle phase) at time ``now``, with one captured compute process on each busy MIG."""
    snap = parse_query_gpu_csv(section("idle :: query-gpu (csv, what the exporter parses)"), host=HOST)
    snap = merge_list(snap, parse_list(section("capabilities :: list (-L)")))
    procs = parse_compute_apps_csv(section("load :: query-compute-apps (per-process)"))
    gpu = snap.gpus[0]
    placed = []
    for proc, mig in zip(procs, [m for m in gpu.mig if m.uuid in busy], strict=False):
        placed.append(dataclasses.replace(proc, mig_uuid=mig.uuid, gpu_instance_id=mig.gpu_instance_id))
    return dataclasses.replace(snap, taken_at=now, processes=tuple(placed))
